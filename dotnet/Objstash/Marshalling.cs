// Moving bytes across the boundary without unsafe code: the caller's arrays pinned for a
// call (GCHandle), keys as flat arrays of 32 bytes, and the library's buffers copied into
// managed arrays and freed at once.

using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;

namespace Objstash
{
    /// <summary>Byte arrays pinned for one call, with the NativeBytes that point at them.</summary>
    internal sealed class Pinned : IDisposable
    {
        private readonly GCHandle[] _handles;
        public readonly NativeBytes[] Bytes;

        public Pinned(IList<byte[]> arrays)
        {
            _handles = new GCHandle[arrays.Count];
            Bytes = new NativeBytes[arrays.Count];
            try
            {
                for (int i = 0; i < arrays.Count; i++)
                {
                    var array = arrays[i] ?? throw new ArgumentNullException("an object is null");
                    _handles[i] = GCHandle.Alloc(array, GCHandleType.Pinned);
                    Bytes[i] = new NativeBytes { Data = _handles[i].AddrOfPinnedObject(), Len = (UIntPtr)array.Length };
                }
            }
            catch
            {
                Dispose();
                throw;
            }
        }

        /// <summary>Strings as UTF-8, in one array pinned once.</summary>
        public static Pinned Utf8(IList<string> texts, string what)
        {
            if (texts == null) throw new ArgumentNullException(what);
            var all = new byte[texts.Count][];
            for (int i = 0; i < texts.Count; i++)
            {
                if (texts[i] == null) throw new ArgumentNullException(what, $"{what}[{i}] is null");
                all[i] = Encoding.UTF8.GetBytes(texts[i]);
            }
            return new Pinned(all);
        }

        public void Dispose()
        {
            foreach (var h in _handles)
                if (h.IsAllocated) h.Free();
        }
    }

    internal static class Keys
    {
        private const string Hex = "0123456789abcdef";

        public static string ToHex(byte[] flat, int index)
        {
            var chars = new char[64];
            for (int i = 0; i < 32; i++)
            {
                byte b = flat[32 * index + i];
                chars[2 * i] = Hex[b >> 4];
                chars[2 * i + 1] = Hex[b & 15];
            }
            return new string(chars);
        }

        public static string[] AllToHex(byte[] flat, int n)
        {
            var keys = new string[n];
            for (int i = 0; i < n; i++) keys[i] = ToHex(flat, i);
            return keys;
        }

        private static int Digit(char c)
        {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            if (c >= 'A' && c <= 'F') return c - 'A' + 10;
            return -1;
        }

        /// <summary>Keys of 64 hex digits as one flat array of 32-byte keys.</summary>
        public static byte[] Parse(IList<string> keys, string what)
        {
            if (keys == null) throw new ArgumentNullException(what);
            var flat = new byte[32 * keys.Count];
            for (int k = 0; k < keys.Count; k++)
            {
                string key = keys[k] ?? throw new ArgumentNullException(what, $"{what}[{k}] is null");
                if (key.Length != 64)
                    throw new ObjstashException(ObjstashStatus.InvalidArgument, $"\"{key}\" is not a key: 64 hex digits");
                for (int i = 0; i < 32; i++)
                {
                    int hi = Digit(key[2 * i]), lo = Digit(key[2 * i + 1]);
                    if (hi < 0 || lo < 0)
                        throw new ObjstashException(ObjstashStatus.InvalidArgument, $"\"{key}\" is not a key: 64 hex digits");
                    flat[32 * k + i] = (byte)(hi << 4 | lo);
                }
            }
            return flat;
        }
    }

    internal static class Buffers
    {
        /// <summary>A buffer's bytes (null for none), without freeing it.</summary>
        public static byte[] Copy(NativeBuffer b)
        {
            if (b.Data == IntPtr.Zero) return null;
            var bytes = new byte[(int)b.Len];
            if (bytes.Length > 0) Marshal.Copy(b.Data, bytes, 0, bytes.Length);
            return bytes;
        }

        public static string Utf8(NativeBuffer b)
        {
            var bytes = Copy(b);
            return bytes == null ? null : Encoding.UTF8.GetString(bytes);
        }

        /// <summary>Every buffer's bytes, each freed.</summary>
        private static readonly int BufferSize = Marshal.SizeOf(typeof(NativeBuffer));

        /// <summary>Buffer <paramref name="i"/> of an array the library returned, read field
        /// by field: Marshal.PtrToStructure, by reflection, cost Mono about as much as the
        /// read of the object itself.</summary>
        public static NativeBuffer At(IntPtr array, int i)
        {
            IntPtr at = array + i * BufferSize;
            return new NativeBuffer { Data = Marshal.ReadIntPtr(at), Len = (UIntPtr)(ulong)Marshal.ReadIntPtr(at, IntPtr.Size).ToInt64() };
        }

        /// <summary>Marks buffer <paramref name="i"/> of a library's array as given back
        /// (its data freed by the caller), so that freeing the array's buffers skips it.</summary>
        public static void Forget(IntPtr array, int i) => Marshal.WriteIntPtr(array + i * BufferSize, IntPtr.Zero);

        /// <summary>The strings of an array of <paramref name="n"/> buffers the library
        /// returned, which this frees (each buffer, then the array).</summary>
        public static List<string> TakeStrings(IntPtr array, UIntPtr n)
        {
            try
            {
                var strings = new List<string>((int)n);
                for (int i = 0; i < (int)n; i++) strings.Add(Utf8(At(array, i)));
                return strings;
            }
            finally
            {
                Native.objstash_free_buffers(array, n);
                Native.objstash_free(array);
            }
        }

        public static byte[][] Take(NativeBuffer[] buffers)
        {
            try
            {
                var taken = new byte[buffers.Length][];
                for (int i = 0; i < buffers.Length; i++) taken[i] = Copy(buffers[i]);
                return taken;
            }
            finally
            {
                Native.objstash_free_buffers(buffers, (UIntPtr)buffers.Length);
            }
        }
    }

    internal static class Models
    {
        /// <summary>A model the library reported, its name freed.</summary>
        public static Model Take(NativeModel m)
        {
            try
            {
                return new Model
                {
                    Root = Keys.ToHex(m.Root, 0),
                    Name = Buffers.Utf8(m.Name),
                    Objects = m.Objects,
                    Missing = m.Missing,
                    StoredBytes = m.StoredBytes,
                    LastUse = m.LastUseMs < 0
                        ? (DateTime?)null
                        : new DateTime(1970, 1, 1, 0, 0, 0, DateTimeKind.Utc).AddMilliseconds(m.LastUseMs),
                    Pinned = m.Pinned,
                };
            }
            finally
            {
                Native.objstash_free(m.Name.Data);
            }
        }
    }
}
