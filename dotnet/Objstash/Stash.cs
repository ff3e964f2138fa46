// Objstash.Stash: a content-addressed object cache in one SQLite file, for .NET
// (netstandard2.0: .NET Framework 4.6.1+ and 4.8, Mono, .NET 6+). One instance may be used
// by many threads at once; Dispose closes it (every committed object stays).

using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Text;

namespace Objstash
{
    /// <summary>A failed call: the native status and message.</summary>
    public sealed class ObjstashException : Exception
    {
        public ObjstashStatus Status { get; }

        public ObjstashException(ObjstashStatus status, string message) : base(message)
        {
            Status = status;
        }
    }

    /// <summary>How to open a stash; every setting left null is what the stash records,
    /// or the default for a new one.</summary>
    public sealed class StashOptions
    {
        /// <summary>"single" or "bucketed": fixed when a stash is made.</summary>
        public string Layout { get; set; }
        /// <summary>"fast", "safe" or "owned".</summary>
        public string Durability { get; set; }
        /// <summary>"gzip" or "zstd-dict".</summary>
        public string Codec { get; set; }
        /// <summary>"rows" or "file": where a new stash keeps its objects' bytes.</summary>
        public string Values { get; set; }
        /// <summary>A size cap in bytes to record.</summary>
        public ulong? MaxSize { get; set; }
        /// <summary>Bytes of the database file each read connection may map into memory
        /// (SQLite's mmap_size, at most about 2 GiB); null: the library's default (a small
        /// file whole). Speckle's own cache maps 30 GB.</summary>
        public ulong? ReadMapBytes { get; set; }
        public bool ReadOnly { get; set; }
        /// <summary>Fail (NotFound) rather than create a stash that is not there.</summary>
        public bool MustExist { get; set; }
        /// <summary>Record a durability or codec other than the recorded one.</summary>
        public bool Reconfigure { get; set; }
        /// <summary>Evict objects used moments ago too (no grace period): for tests and
        /// one-off trims.</summary>
        public bool NoEvictionGrace { get; set; }
    }

    /// <summary>A model as the stash reports it: a root and the objects it lists.</summary>
    public sealed class Model
    {
        public string Root { get; internal set; }
        public string Name { get; internal set; }
        public ulong Objects { get; internal set; }
        /// <summary>Objects listed and not stored: while any is, the root reads as absent.</summary>
        public ulong Missing { get; internal set; }
        public ulong StoredBytes { get; internal set; }
        public DateTime? LastUse { get; internal set; }
        public bool Pinned { get; internal set; }
        public bool Complete => Missing == 0;
    }

    /// <summary>The size report.</summary>
    public sealed class StashStats
    {
        public ulong Objects { get; internal set; }
        public ulong RawBytes { get; internal set; }
        public ulong StoredBytes { get; internal set; }
        public ulong FileBytes { get; internal set; }
        public ulong Names { get; internal set; }
        public ulong? MaxSize { get; internal set; }
        public ulong EvictedObjects { get; internal set; }
    }

    /// <summary>What a stash served since counting began (<see cref="Stash.Counters"/>:
    /// every process's calls), or one handle since it opened
    /// (<see cref="Stash.HandleCounters"/>): is the cache helping?</summary>
    public sealed class CacheCounters
    {
        /// <summary>When counting began (UTC); null for a stash that never counted.</summary>
        public DateTime? Since { get; internal set; }
        /// <summary>Keys read and served, from the stash or through its remote.</summary>
        public ulong Hits { get; internal set; }
        /// <summary>Keys read and found nowhere.</summary>
        public ulong Misses { get; internal set; }
        /// <summary>Of the hits, keys read through the remote.</summary>
        public ulong ReadThroughs { get; internal set; }
        public ulong ReadThroughBytes { get; internal set; }
        /// <summary>Keys looked up (Contains, Missing) that were stored.</summary>
        public ulong Found { get; internal set; }
        /// <summary>Keys looked up that were not.</summary>
        public ulong Absent { get; internal set; }
        /// <summary>Objects saved that were new.</summary>
        public ulong Saved { get; internal set; }
        /// <summary>Saves of objects already stored (nothing written).</summary>
        public ulong SavedAgain { get; internal set; }
        /// <summary>Objects evicted since counting began (0 for a handle).</summary>
        public ulong Evicted { get; internal set; }
        public ulong EvictedBytes { get; internal set; }
        /// <summary>Hits over keys read; null before any read.</summary>
        public double? HitRate => Hits + Misses == 0 ? (double?)null : (double)Hits / (Hits + Misses);
    }

    /// <summary>What Verify found.</summary>
    public sealed class VerifyReport
    {
        public bool Ok { get; internal set; }
        public ulong Checked { get; internal set; }
        public ulong Corrupt { get; internal set; }
        public ulong Unreachable { get; internal set; }
        public ulong Problems { get; internal set; }
        public string Text { get; internal set; }
        public override string ToString() => Text;
    }

    public sealed class Stash : IDisposable
    {
        private readonly StashHandle _handle;

        /// <summary>The path of the database file.</summary>
        public string Path { get; }

        private Stash(StashHandle handle, string path)
        {
            _handle = handle;
            Path = path;
        }

        /// <summary>The native library's version.</summary>
        public static string Version => Marshal.PtrToStringAnsi(Native.objstash_version());

        /// <summary>Opens (or creates) the stash at <paramref name="path"/>.</summary>
        public static Stash Open(string path, StashOptions options = null)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            options = options ?? new StashOptions();
            var native = new NativeOptions
            {
                Layout = Choice(options.Layout, "layout", "single", "bucketed"),
                Durability = Choice(options.Durability, "durability", "fast", "safe", "owned"),
                Codec = Choice(options.Codec, "codec", "gzip", "zstd-dict"),
                Values = Choice(options.Values, "values", "rows", "file"),
                MaxSize = options.MaxSize ?? 0,
                ReadMapBytes = options.ReadMapBytes ?? 0,
                ReadOnly = options.ReadOnly,
                MustExist = options.MustExist,
                Reconfigure = options.Reconfigure,
                NoEvictionGrace = options.NoEvictionGrace,
            };
            Check(Native.objstash_open(Utf8Z(path), ref native, out StashHandle handle));
            return new Stash(handle, path);
        }

        private static int Choice(string value, string what, params string[] choices)
        {
            if (value == null) return 0;
            int i = Array.IndexOf(choices, value);
            if (i < 0)
                throw new ArgumentException($"{what} must be one of {string.Join(", ", choices)}, not \"{value}\"", what);
            return i + 1;
        }

        // Calls -------------------------------------------------------------------------

        private static bool[] Bools(byte[] bytes)
        {
            var bools = new bool[bytes.Length];
            for (int i = 0; i < bytes.Length; i++) bools[i] = bytes[i] != 0;
            return bools;
        }

        internal static void Check(ObjstashStatus status)
        {
            if (status == ObjstashStatus.Ok) return;
            string message = Marshal.PtrToStringAnsi(Native.objstash_last_error()) ?? "";
            // Marshal.PtrToStringAnsi reads UTF-8 on every platform .NET Core runs on; the
            // library's messages are ASCII apart from paths.
            throw new ObjstashException(status, message);
        }

        private StashHandle Handle
        {
            get
            {
                if (_handle.IsClosed) throw new ObjectDisposedException(nameof(Stash), $"the stash at {Path} is disposed");
                return _handle;
            }
        }

        internal static byte[] Utf8Z(string text)
        {
            int n = Encoding.UTF8.GetByteCount(text);
            var bytes = new byte[n + 1];
            Encoding.UTF8.GetBytes(text, 0, text.Length, bytes, 0);
            return bytes;
        }

        /// <summary>The key (64 hex digits) <paramref name="data"/> is stored under, computed
        /// without storing it.</summary>
        public static string KeyOf(byte[] data)
        {
            if (data == null) throw new ArgumentNullException(nameof(data));
            using (var pinned = new Pinned(new[] { data }))
            {
                var key = new byte[32];
                Check(Native.objstash_key_of(pinned.Bytes[0], key));
                return Keys.ToHex(key, 0);
            }
        }

        // Objects by key ----------------------------------------------------------------

        /// <summary>Stores an object; its key. Every read sees it once this returns.</summary>
        public string Save(byte[] data) => SaveAll(new[] { data })[0];

        /// <summary>Stores objects, hashed and compressed in parallel; their keys in order.</summary>
        public string[] SaveAll(IList<byte[]> objects)
        {
            if (objects == null) throw new ArgumentNullException(nameof(objects));
            using (var pinned = new Pinned(objects))
            {
                var keys = new byte[32 * objects.Count];
                Check(Native.objstash_save_all(Handle, pinned.Bytes, (UIntPtr)objects.Count, keys));
                return Keys.AllToHex(keys, objects.Count);
            }
        }

        /// <summary>The object under <paramref name="key"/>, checked against it; null when it
        /// is not stored.</summary>
        public byte[] Get(string key)
        {
            var flat = Keys.Parse(new[] { key }, nameof(key));
            Check(Native.objstash_get(Handle, flat, out NativeBuffer found));
            try { return Buffers.Copy(found); }
            finally { Native.objstash_free(found.Data); }
        }

        /// <summary>The objects under <paramref name="keys"/>, in order (null where not stored),
        /// read in one snapshot and checked in parallel.</summary>
        public byte[][] GetMany(IList<string> keys)
        {
            var flat = Keys.Parse(keys, nameof(keys));
            var buffers = new NativeBuffer[keys.Count];
            Check(Native.objstash_get_many(Handle, flat, (UIntPtr)keys.Count, buffers));
            return Buffers.Take(buffers);
        }

        /// <summary>Whether an object is stored under <paramref name="key"/>.</summary>
        public bool Contains(string key) => !Missing(new[] { key })[0];

        /// <summary>For each key, whether it is not stored (one call).</summary>
        public bool[] Missing(IList<string> keys)
        {
            var flat = Keys.Parse(keys, nameof(keys));
            var missing = new byte[keys.Count];
            Check(Native.objstash_missing(Handle, flat, (UIntPtr)keys.Count, missing));
            return Bools(missing);
        }

        /// <summary>Removes objects (and their names) in one transaction; whether each was
        /// stored.</summary>
        public bool[] Remove(IList<string> keys)
        {
            var flat = Keys.Parse(keys, nameof(keys));
            var removed = new byte[keys.Count];
            Check(Native.objstash_remove(Handle, flat, (UIntPtr)keys.Count, removed));
            return Bools(removed);
        }

        /// <summary>Returns once everything saved and removed before is committed.</summary>
        public void Flush() => Check(Native.objstash_flush(Handle));

        /// <summary>Records a size cap in bytes (null: none); eviction runs in the background.</summary>
        public void SetMaxSize(ulong? maxSize) => Check(Native.objstash_set_max_size(Handle, maxSize ?? 0));

        /// <summary>Evicts least recently used objects and models until the files fit;
        /// the objects evicted.</summary>
        public ulong TrimTo(ulong maxSize)
        {
            Check(Native.objstash_trim_to(Handle, maxSize, out ulong objects, out ulong _));
            return objects;
        }

        // Names -------------------------------------------------------------------------

        /// <summary>Stores objects under names of your own (a name saved again points to its
        /// new object); their keys.</summary>
        public string[] SaveNamed(IList<string> names, IList<byte[]> objects)
        {
            if (names == null) throw new ArgumentNullException(nameof(names));
            if (objects == null) throw new ArgumentNullException(nameof(objects));
            if (names.Count != objects.Count) throw new ArgumentException("as many names as objects", nameof(names));
            using (var pinnedNames = Pinned.Utf8(names, nameof(names)))
            using (var pinnedObjects = new Pinned(objects))
            {
                var keys = new byte[32 * names.Count];
                Check(Native.objstash_save_named(Handle, pinnedNames.Bytes, pinnedObjects.Bytes, (UIntPtr)names.Count, keys));
                return Keys.AllToHex(keys, names.Count);
            }
        }

        /// <summary>The objects saved under <paramref name="names"/>, in order (null where
        /// none is).</summary>
        public byte[][] GetNamed(IList<string> names)
        {
            using (var pinned = Pinned.Utf8(names, nameof(names)))
            {
                var buffers = new NativeBuffer[names.Count];
                Check(Native.objstash_get_named(Handle, pinned.Bytes, (UIntPtr)names.Count, buffers));
                return Buffers.Take(buffers);
            }
        }

        /// <summary>The object saved under <paramref name="name"/>, or null: one native
        /// call with nothing to pin but the name (a loop of single reads).</summary>
        public byte[] GetNamed(string name)
        {
            if (name == null) throw new ArgumentNullException(nameof(name));
            var bytes = Encoding.UTF8.GetBytes(name);
            Check(Native.objstash_get_one_named(Handle, bytes, (UIntPtr)bytes.Length, out NativeBuffer found));
            try { return Buffers.Copy(found); }
            finally { Native.objstash_free(found.Data); }
        }

        /// <summary>Whether <paramref name="name"/> maps to an object that is stored (not a
        /// root whose model misses objects).</summary>
        public bool HasNamed(string name)
        {
            if (name == null) throw new ArgumentNullException(nameof(name));
            var bytes = Encoding.UTF8.GetBytes(name);
            Check(Native.objstash_has_one_named(Handle, bytes, (UIntPtr)bytes.Length, out byte has));
            return has != 0;
        }

        /// <summary>The keys <paramref name="names"/> map to (null where none is saved).</summary>
        public string[] Resolve(IList<string> names)
        {
            using (var pinned = Pinned.Utf8(names, nameof(names)))
            {
                var keys = new byte[32 * names.Count];
                var found = new byte[names.Count];
                Check(Native.objstash_resolve(Handle, pinned.Bytes, (UIntPtr)names.Count, keys, found));
                var hex = new string[names.Count];
                for (int i = 0; i < hex.Length; i++) hex[i] = found[i] != 0 ? Keys.ToHex(keys, i) : null;
                return hex;
            }
        }

        /// <summary>Removes names (their objects stay); whether each was saved.</summary>
        public bool[] RemoveNamed(IList<string> names)
        {
            using (var pinned = Pinned.Utf8(names, nameof(names)))
            {
                var removed = new byte[names.Count];
                Check(Native.objstash_remove_named(Handle, pinned.Bytes, (UIntPtr)names.Count, removed));
                return Bools(removed);
            }
        }

        /// <summary>Every name saved, with its key.</summary>
        /// <summary>Every named object as text, in one call: each name and its object's
        /// UTF-8 bytes decoded (by the library, in parallel, into UTF-16), handed to
        /// <paramref name="add"/>. Names whose object is not stored are left out.</summary>
        public void ForEachNamedText(Action<string, string> add)
        {
            Check(Native.objstash_named_texts(Handle, out NativeBuffer text, out IntPtr spans, out UIntPtr count));
            try
            {
                int n = (int)count;
                var at = new long[4 * n];
                if (n > 0) Marshal.Copy(spans, at, 0, at.Length);
                long origin = text.Data.ToInt64();
                for (int i = 0; i < n; i++)
                {
                    string name = Marshal.PtrToStringUni(new IntPtr(origin + 2 * at[4 * i]), (int)at[4 * i + 1]);
                    string json = Marshal.PtrToStringUni(new IntPtr(origin + 2 * at[4 * i + 2]), (int)at[4 * i + 3]);
                    add(name, json);
                }
            }
            finally
            {
                Native.objstash_free(text.Data);
                Native.objstash_free(spans);
            }
        }

        public IReadOnlyList<(string Name, string Key)> Names()
        {
            Check(Native.objstash_names(Handle, out IntPtr names, out IntPtr keys, out UIntPtr count));
            int n = (int)count;
            try
            {
                var text = Buffers.TakeStrings(names, count);
                var listed = new List<(string, string)>(n);
                var flatKeys = new byte[32 * n];
                if (n > 0) Marshal.Copy(keys, flatKeys, 0, flatKeys.Length);
                for (int i = 0; i < n; i++) listed.Add((text[i], Keys.ToHex(flatKeys, i)));
                return listed;
            }
            finally
            {
                Native.objstash_free(keys);
            }
        }

        /// <summary>The ids the JSON object <paramref name="json"/> lists in its own
        /// <c>__closure</c>, by the library's one parser with Speckle's rules: the top-level
        /// object's field only (a child reference's <c>null</c> or an inline reference's map
        /// is not it), blob ids left out, sorted, each once. ArgumentException if it is not
        /// a JSON object or its closure is neither an object nor null.</summary>
        public static IReadOnlyList<string> ClosureIds(byte[] json)
        {
            if (json == null) throw new ArgumentNullException(nameof(json));
            using (var pinned = new Pinned(new[] { json }))
            {
                var status = Native.objstash_closure_ids(pinned.Bytes[0], out IntPtr ids, out UIntPtr count);
                if (status == ObjstashStatus.InvalidArgument)
                    throw new ArgumentException(Marshal.PtrToStringAnsi(Native.objstash_last_error()), nameof(json));
                Check(status);
                return Buffers.TakeStrings(ids, count);
            }
        }

        // Models ------------------------------------------------------------------------

        /// <summary>Saves a model: its members, then its root, and declares it (kept and
        /// evicted whole; the root reads as absent while a member is not stored).</summary>
        public Model SaveModel(byte[] root, IList<byte[]> members, string name = null)
        {
            if (root == null) throw new ArgumentNullException(nameof(root));
            if (members == null) throw new ArgumentNullException(nameof(members));
            using (var pinnedRoot = new Pinned(new[] { root }))
            using (var pinnedMembers = new Pinned(members))
            using (var pinnedName = name == null ? null : Pinned.Utf8(new[] { name }, nameof(name)))
            {
                var noName = new NativeBytes();
                Check(Native.objstash_save_model(Handle, pinnedRoot.Bytes[0], pinnedMembers.Bytes,
                    (UIntPtr)members.Count, pinnedName?.Bytes[0] ?? noName, out NativeModel model));
                return Models.Take(model);
            }
        }

        /// <summary>Declares <paramref name="root"/> a model of <paramref name="members"/>
        /// (keys; the root need not be listed, nor any of them stored yet).</summary>
        public Model DeclareModel(string root, IList<string> members, string name = null)
        {
            var rootKey = Keys.Parse(new[] { root }, nameof(root));
            var flat = Keys.Parse(members, nameof(members));
            using (var pinnedName = name == null ? null : Pinned.Utf8(new[] { name }, nameof(name)))
            {
                Check(Native.objstash_declare_model(Handle, rootKey, flat, (UIntPtr)members.Count,
                    pinnedName?.Bytes[0] ?? new NativeBytes(), out NativeModel model));
                return Models.Take(model);
            }
        }

        /// <summary>The model of <paramref name="root"/>, or null.</summary>
        public Model GetModel(string root)
        {
            Check(Native.objstash_model(Handle, Keys.Parse(new[] { root }, nameof(root)), out NativeModel model, out bool found));
            return found ? Models.Take(model) : null;
        }

        /// <summary>Pins the model of <paramref name="root"/> (never evicted); whether there is one.</summary>
        public bool PinModel(string root)
        {
            Check(Native.objstash_pin_model(Handle, Keys.Parse(new[] { root }, nameof(root)), out bool found));
            return found;
        }

        /// <summary>Unpins the model of <paramref name="root"/>; whether there is one.</summary>
        public bool UnpinModel(string root)
        {
            Check(Native.objstash_unpin_model(Handle, Keys.Parse(new[] { root }, nameof(root)), out bool found));
            return found;
        }

        /// <summary>Removes the model of <paramref name="root"/>: its root and every object
        /// no other model lists; whether there was one.</summary>
        public bool RemoveModel(string root)
        {
            Check(Native.objstash_remove_model(Handle, Keys.Parse(new[] { root }, nameof(root)), out bool found));
            return found;
        }

        /// <summary>Every object of the complete model of <paramref name="root"/>, in the
        /// order the file holds them, each checked; null when it is no complete model.</summary>
        public IReadOnlyList<(string Key, byte[] Data)> ReadModel(string root)
        {
            Check(Native.objstash_read_model(Handle, Keys.Parse(new[] { root }, nameof(root)),
                out IntPtr keys, out IntPtr objects, out UIntPtr count, out bool found));
            if (!found) return null;
            int n = (int)count;
            try
            {
                var flat = new byte[32 * n];
                if (n > 0) Marshal.Copy(keys, flat, 0, flat.Length);
                var read = new List<(string, byte[])>(n);
                for (int i = 0; i < n; i++) read.Add((Keys.ToHex(flat, i), Buffers.Copy(Buffers.At(objects, i))));
                return read;
            }
            finally
            {
                Native.objstash_free_buffers(objects, count);
                Native.objstash_free(objects);
                Native.objstash_free(keys);
            }
        }

        /// <summary>The objects of the model of <paramref name="root"/>, left in the
        /// library's memory until each is taken (null if it is not a complete model).</summary>
        internal NativeObjects ReadModelKept(string root)
        {
            Check(Native.objstash_read_model(Handle, Keys.Parse(new[] { root }, nameof(root)),
                out IntPtr keys, out NativeObjects objects, out UIntPtr count, out bool found));
            if (!found)
            {
                objects.Dispose();
                Native.objstash_free(keys);
                return null;
            }
            objects.Keep(keys, (int)count);
            return objects;
        }

        // Reports -----------------------------------------------------------------------

        public StashStats Stats()
        {
            Check(Native.objstash_stats(Handle, out NativeStats s));
            return new StashStats
            {
                Objects = s.Objects,
                RawBytes = s.RawBytes,
                StoredBytes = s.StoredBytes,
                FileBytes = s.FileBytes,
                Names = s.Names,
                MaxSize = s.MaxSize == 0 ? (ulong?)null : s.MaxSize,
                EvictedObjects = s.EvictedObjects,
            };
        }

        /// <summary>What the stash served since counting began: every process's calls
        /// (another handle's are recorded with its next commit, within about a second when
        /// idle, and when it closes); this handle's are committed first.</summary>
        public CacheCounters Counters() => CountersOf(false);

        /// <summary>What this handle's calls served since it opened.</summary>
        public CacheCounters HandleCounters() => CountersOf(true);

        /// <summary>Sets the stash's counters to 0; counting begins now.</summary>
        public void ResetCounters() => Check(Native.objstash_reset_counters(Handle));

        private CacheCounters CountersOf(bool thisHandle)
        {
            Check(Native.objstash_counters(Handle, thisHandle, out NativeCounters c));
            return new CacheCounters
            {
                Since = c.SinceUnixMs == 0
                    ? (DateTime?)null
                    : new DateTime(1970, 1, 1, 0, 0, 0, DateTimeKind.Utc).AddMilliseconds(c.SinceUnixMs),
                Hits = c.Hits,
                Misses = c.Misses,
                ReadThroughs = c.ReadThroughs,
                ReadThroughBytes = c.ReadThroughBytes,
                Found = c.Found,
                Absent = c.Absent,
                Saved = c.Saved,
                SavedAgain = c.SavedAgain,
                Evicted = c.Evicted,
                EvictedBytes = c.EvictedBytes,
            };
        }

        /// <summary>Reads and checks every object and name.</summary>
        public VerifyReport Verify()
        {
            Check(Native.objstash_verify(Handle, out NativeVerify r));
            try
            {
                return new VerifyReport
                {
                    Ok = r.Ok,
                    Checked = r.Checked,
                    Corrupt = r.Corrupt,
                    Unreachable = r.Unreachable,
                    Problems = r.Problems,
                    Text = Buffers.Utf8(r.Text),
                };
            }
            finally
            {
                Native.objstash_free(r.Text.Data);
            }
        }

        /// <summary>Checks the stash at <paramref name="path"/> (every handle closed) and
        /// rebuilds it from what verifies if anything is wrong; the report, and whether
        /// anything was lost.</summary>
        public static string Repair(string path, out bool lost)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            Check(Native.objstash_repair(Utf8Z(path), out NativeBuffer text, out lost));
            try { return Buffers.Utf8(text); }
            finally { Native.objstash_free(text.Data); }
        }

        /// <summary>Whether this handle only reads.</summary>
        public bool IsReadOnly
        {
            get
            {
                Check(Native.objstash_is_read_only(Handle, out bool readOnly));
                return readOnly;
            }
        }

        /// <summary>Flushes and closes the stash (reporting a failure to commit); the
        /// handle is released once no call uses it.</summary>
        public void Close()
        {
            if (_handle.IsClosed) return;
            var status = Native.objstash_close(_handle);
            _handle.Dispose();
            Check(status);
        }

        /// <summary>As <see cref="Close"/>; twice is fine.</summary>
        public void Dispose() => Close();

        /// <summary>Whether the stash was closed (Close or Dispose).</summary>
        public bool IsClosed => _handle.IsClosed;
    }
}
