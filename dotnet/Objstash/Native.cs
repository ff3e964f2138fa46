// The C ABI (ffi/include/objstash.h) as P/Invoke declarations, and its structs. Only this
// file knows the native library's name: "objstash_c" (libobjstash_c.so, objstash_c.dll,
// libobjstash_c.dylib), which no other add-in's SQLite takes in the host process.

using System;
using System.Runtime.InteropServices;

namespace Objstash
{
    /// <summary>What a native call did (ObjstashStatus in objstash.h).</summary>
    public enum ObjstashStatus
    {
        Ok = 0,
        InvalidArgument = 1,
        Closed = 2,
        NotFound = 3,
        NotAStash = 4,
        Corrupt = 5,
        Locked = 6,
        Busy = 7,
        ReadOnly = 8,
        TooLarge = 9,
        Settings = 10,
        WriterStopped = 11,
        Io = 12,
        DiskFull = 13,
        Database = 14,
        Panic = 15,
        Other = 16,
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeBytes
    {
        public IntPtr Data;
        public UIntPtr Len;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeBuffer
    {
        public IntPtr Data;
        public UIntPtr Len;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeOptions
    {
        public int Layout;
        public int Durability;
        public int Codec;
        public int Values;
        public ulong MaxSize;
        public ulong ReadMapBytes;
        [MarshalAs(UnmanagedType.I1)] public bool ReadOnly;
        [MarshalAs(UnmanagedType.I1)] public bool MustExist;
        [MarshalAs(UnmanagedType.I1)] public bool Reconfigure;
        [MarshalAs(UnmanagedType.I1)] public bool NoEvictionGrace;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeModel
    {
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 32)] public byte[] Root;
        public NativeBuffer Name;
        public ulong Objects;
        public ulong Missing;
        public ulong StoredBytes;
        public long LastUseMs;
        [MarshalAs(UnmanagedType.I1)] public bool Pinned;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeStats
    {
        public ulong Objects;
        public ulong RawBytes;
        public ulong StoredBytes;
        public ulong FileBytes;
        public ulong Names;
        public ulong MaxSize;
        public ulong PinnedObjects;
        public ulong EvictedObjects;
        public ulong EvictedBytes;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeCounters
    {
        public ulong SinceUnixMs;
        public ulong Hits;
        public ulong Misses;
        public ulong ReadThroughs;
        public ulong ReadThroughBytes;
        public ulong Found;
        public ulong Absent;
        public ulong Saved;
        public ulong SavedAgain;
        public ulong Evicted;
        public ulong EvictedBytes;
    }

    [StructLayout(LayoutKind.Sequential)]
    internal struct NativeVerify
    {
        [MarshalAs(UnmanagedType.I1)] public bool Ok;
        public ulong Checked;
        public ulong Corrupt;
        public ulong Unreachable;
        public ulong Problems;
        public NativeBuffer Text;
    }

    /// <summary>A native handle, released once no call uses it (the runtime counts them).</summary>
    internal sealed class StashHandle : SafeHandle
    {
        public StashHandle() : base(IntPtr.Zero, true) { }

        public override bool IsInvalid => handle == IntPtr.Zero;

        protected override bool ReleaseHandle()
        {
            Native.objstash_free_handle(handle);
            return true;
        }
    }

    internal static class Native
    {
        private const string Lib = "objstash_c";

        // Keys cross as flat arrays of 32-byte keys (ObjstashKey[n] in C is 32n bytes);
        // objects and names as arrays of ObjstashBytes into memory pinned for the call;
        // arrays of C bools as bytes (Mono marshals a bool[] as 4-byte BOOLs whatever
        // MarshalAs says).

        [DllImport(Lib)] internal static extern IntPtr objstash_last_error();
        [DllImport(Lib)] internal static extern IntPtr objstash_version();
        [DllImport(Lib)] internal static extern void objstash_free(IntPtr ptr);
        [DllImport(Lib)] internal static extern void objstash_free_buffers([In, Out] NativeBuffer[] buffers, UIntPtr n);
        [DllImport(Lib)] internal static extern void objstash_free_buffers(IntPtr buffers, UIntPtr n);

        [DllImport(Lib)] internal static extern ObjstashStatus objstash_open(byte[] path, ref NativeOptions options, out StashHandle handle);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_close(StashHandle handle);
        [DllImport(Lib)] internal static extern void objstash_free_handle(IntPtr handle);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_is_read_only(StashHandle handle, [MarshalAs(UnmanagedType.I1)] out bool readOnly);

        [DllImport(Lib)] internal static extern ObjstashStatus objstash_key_of(NativeBytes data, [Out] byte[] key);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_save_all(StashHandle handle, NativeBytes[] objects, UIntPtr n, [Out] byte[] keys);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_get(StashHandle handle, byte[] key, out NativeBuffer found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_get_many(StashHandle handle, byte[] keys, UIntPtr n, [Out] NativeBuffer[] outs);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_missing(StashHandle handle, byte[] keys, UIntPtr n, [Out] byte[] missing);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_remove(StashHandle handle, byte[] keys, UIntPtr n, [Out] byte[] removed);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_flush(StashHandle handle);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_set_max_size(StashHandle handle, ulong maxSize);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_trim_to(StashHandle handle, ulong maxSize, out ulong objects, out ulong bytes);

        [DllImport(Lib)] internal static extern ObjstashStatus objstash_save_named(StashHandle handle, NativeBytes[] names, NativeBytes[] objects, UIntPtr n, [Out] byte[] keys);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_get_named(StashHandle handle, NativeBytes[] names, UIntPtr n, [Out] NativeBuffer[] outs);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_get_one_named(StashHandle handle, byte[] name, UIntPtr len, out NativeBuffer found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_has_one_named(StashHandle handle, byte[] name, UIntPtr len, out byte has);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_resolve(StashHandle handle, NativeBytes[] names, UIntPtr n, [Out] byte[] keys, [Out] byte[] found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_remove_named(StashHandle handle, NativeBytes[] names, UIntPtr n, [Out] byte[] removed);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_names(StashHandle handle, out IntPtr names, out IntPtr keys, out UIntPtr n);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_named_texts(StashHandle handle, out NativeBuffer text, out IntPtr spans, out UIntPtr n);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_closure_ids(NativeBytes json, out IntPtr ids, out UIntPtr n);

        [DllImport(Lib)] internal static extern ObjstashStatus objstash_save_model(StashHandle handle, NativeBytes root, NativeBytes[] members, UIntPtr n, NativeBytes name, out NativeModel model);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_declare_model(StashHandle handle, byte[] root, byte[] members, UIntPtr n, NativeBytes name, out NativeModel model);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_model(StashHandle handle, byte[] root, out NativeModel model, [MarshalAs(UnmanagedType.I1)] out bool found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_pin_model(StashHandle handle, byte[] root, [MarshalAs(UnmanagedType.I1)] out bool found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_unpin_model(StashHandle handle, byte[] root, [MarshalAs(UnmanagedType.I1)] out bool found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_remove_model(StashHandle handle, byte[] root, [MarshalAs(UnmanagedType.I1)] out bool found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_read_model(StashHandle handle, byte[] root, out IntPtr keys, out IntPtr objects, out UIntPtr n, [MarshalAs(UnmanagedType.I1)] out bool found);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_read_model(StashHandle handle, byte[] root, out IntPtr keys, out NativeObjects objects, out UIntPtr n, [MarshalAs(UnmanagedType.I1)] out bool found);

        [DllImport(Lib)] internal static extern ObjstashStatus objstash_stats(StashHandle handle, out NativeStats stats);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_counters(StashHandle handle, [MarshalAs(UnmanagedType.I1)] bool thisHandle, out NativeCounters counters);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_reset_counters(StashHandle handle);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_verify(StashHandle handle, out NativeVerify report);
        [DllImport(Lib)] internal static extern ObjstashStatus objstash_repair(byte[] path, out NativeBuffer text, [MarshalAs(UnmanagedType.I1)] out bool lost);
    }
}
