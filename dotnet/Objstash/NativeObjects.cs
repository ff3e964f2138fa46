// Objects the library returned, left in its memory until each is taken: a model's sweep
// (ModelReadAhead.cs) holds ~140 MB for 110,000 objects, and copied into managed arrays at
// once, every one of them outlived Mono's nursery and was moved again, which cost more than
// the library's read itself. A SafeHandle: a Take under way keeps the memory alive through
// a Dispose on another thread.

using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace Objstash
{
    internal sealed class NativeObjects : SafeHandle
    {
        private IntPtr _keys;
        private int _count;
        private int[] _taken = new int[0];

        public NativeObjects() : base(IntPtr.Zero, true) { }

        public override bool IsInvalid => handle == IntPtr.Zero;

        /// <summary>Takes over the library's array of the objects' keys, and their count.</summary>
        internal void Keep(IntPtr keys, int count)
        {
            _keys = keys;
            _count = count;
            _taken = new int[count];
        }

        public int Count => _count;

        /// <summary>The objects' keys, as one flat array of 32-byte keys.</summary>
        public byte[] Keys()
        {
            var flat = new byte[32 * _count];
            if (_count > 0) Marshal.Copy(_keys, flat, 0, flat.Length);
            return flat;
        }

        /// <summary>Object <paramref name="i"/>, once (null the second time, or once disposed);
        /// its memory is given back as it is taken.</summary>
        public byte[] Take(int i)
        {
            if (Interlocked.Exchange(ref _taken[i], 1) != 0) return null;
            bool added = false;
            try
            {
                DangerousAddRef(ref added);
                var buffer = Buffers.At(handle, i);
                var bytes = Buffers.Copy(buffer);
                Buffers.Forget(handle, i);
                Native.objstash_free(buffer.Data);
                return bytes;
            }
            catch (ObjectDisposedException)
            {
                return null;
            }
            finally
            {
                if (added) DangerousRelease();
            }
        }

        protected override bool ReleaseHandle()
        {
            // Taken buffers were nulled as they went: free(NULL) does nothing.
            Native.objstash_free_buffers(handle, (UIntPtr)_count);
            Native.objstash_free(handle);
            Native.objstash_free(_keys);
            return true;
        }
    }
}
