// A drop-in for Speckle.Sdk's SqLiteJsonCacheManager: the members of its interface
// ISqLiteJsonCacheManager (Speckle.Sdk.SQLite), signature for signature and with its
// semantics, over objstash. Speckle.Sdk cannot be fetched where this was written, so the
// interface is mirrored, not referenced: a connector declares `class Cache :
// ObjstashJsonCacheManager, ISqLiteJsonCacheManager` (or wraps it) and hands it to the SDK,
// most simply through ObjstashJsonCacheManagerFactory.
//
// Speckle's semantics (its SqLiteJsonCacheManager): SaveObject and SaveObjects keep the
// first write of an id (INSERT OR IGNORE), UpdateObject replaces it, SaveObject refuses a
// blank id or JSON (ArgumentException), GetObject and HasObject of any string answer
// null and false, DeleteObject deletes that id alone. One addition, the reason for this
// class: an object that lists children in its own "__closure" (a root) is returned only
// while every child is cached, and is kept and evicted with them (a model), so that a
// receive that trusts a cached root never gets part of a model.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Threading;

namespace Objstash
{
    public class ObjstashJsonCacheManager : IDisposable
    {
        /// <summary>Objects saved per native call by SaveObjects.</summary>
        public const int Batch = 10000;

        private readonly Stash _stash;
        private readonly bool _owns;
        // The model found whole last: its members are served without a check of their own
        // closures, from one sweep of its objects (ModelReadAhead.cs).
        private ModelReadAhead _model;
        private volatile bool _disposed;

        /// <summary>The largest model whose objects are read in one sweep when its members
        /// are asked for (held in memory until each is asked for once); a larger one is read
        /// object by object. Default: 250,000 objects.</summary>
        public ulong ReadAheadObjects { get; set; } = 250000;

        /// <summary>Opens (or creates) a cache at <paramref name="path"/> (Speckle's caches
        /// are one file per project; so is this).</summary>
        public ObjstashJsonCacheManager(string path, StashOptions options = null)
        {
            _stash = Stash.Open(path, options ?? DefaultOptions());
            _owns = true;
        }

        /// <summary>The options a cache opened by path uses: zstd with a trained dictionary,
        /// and the database mapped into memory as Speckle's own cache maps its file (reads
        /// by id touch mapped pages, with no system call).</summary>
        public static StashOptions DefaultOptions() =>
            new StashOptions { Codec = "zstd-dict", ReadMapBytes = 2UL << 30 };

        /// <summary>A cache over an open stash, which Dispose leaves open (after committing
        /// what was saved): how a factory hands out managers over the one handle it keeps.</summary>
        public ObjstashJsonCacheManager(Stash stash)
        {
            _stash = stash ?? throw new ArgumentNullException(nameof(stash));
        }

        /// <summary>The stash underneath (models, stats, verify).</summary>
        public Stash Stash => _stash;

        public string Path => _stash.Path;

        public IReadOnlyCollection<(string Id, string Json)> GetAllObjects()
        {
            var all = new List<(string Id, string Json)>();
            Live.ForEachNamedText((id, json) => all.Add((id, json)));
            return all;
        }

        /// <summary>Deletes the object of <paramref name="id"/> alone: another id whose JSON
        /// is the same (stored once) keeps it.</summary>
        public void DeleteObject(string id)
        {
            if (id == null) throw new ArgumentNullException(nameof(id));
            if (!Nameable(id)) return;
            Live.RemoveNamed(new[] { id });
            // A model found whole before may have lost this member.
            ReplaceModel(null);
        }

        /// <summary>The object saved under <paramref name="id"/>, or null (for any string). An
        /// object that lists children in its own <c>__closure</c> is returned only with
        /// every one of them cached under its id (and is from then on kept and evicted with
        /// them), so that a receive that trusts a cached root never gets part of a model.</summary>
        public string GetObject(string id)
        {
            if (id == null) throw new ArgumentNullException(nameof(id));
            if (!Nameable(id)) return null;
            var model = Volatile.Read(ref _model);
            bool member = model != null && model.Lists(id);
            var data = (member ? model.Take(id) : null) ?? Live.GetNamed(id);
            if (data == null) return null;
            string json = Encoding.UTF8.GetString(data);
            if (member || json.IndexOf("\"__closure\"", StringComparison.Ordinal) < 0)
                return json;
            var closure = ClosureOf(data);
            if (closure.Count == 0) return json;
            return WholeModel(id, closure) ? json : null;
        }

        /// <summary>The ids <paramref name="data"/> lists in its own closure (none for
        /// JSON that is not an object, such as <c>"1"</c>).</summary>
        private static IReadOnlyList<string> ClosureOf(byte[] data)
        {
            try { return Stash.ClosureIds(data); }
            catch (ArgumentException) { return new string[0]; }
        }

        /// <summary>Whether the object of <paramref name="id"/> comes with every id of its
        /// <paramref name="closure"/> cached: then declared a model of them (once, or again
        /// where a declaration lists other members).</summary>
        private bool WholeModel(string id, IReadOnlyList<string> closure)
        {
            var key = Live.Resolve(new[] { id })[0];
            if (key == null) return false;
            // By id: a deleted id is gone even while its object stays under another id.
            var keys = Live.Resolve(closure.ToList());
            if (keys.Any(k => k == null)) return false;
            int members = keys.Where(k => k != key).Distinct().Count();
            var model = Live.GetModel(key);
            // A model declared complete with these members has them all (the library keeps
            // it so in every process): only a first declaration looks for each.
            bool declared = model != null && model.Complete && model.Objects == (ulong)members + 1;
            if (!declared)
            {
                if (Live.Missing(keys).Any(missing => missing)) return false;
                if (Live.IsReadOnly) return true;
                model = Live.DeclareModel(key, keys, id);
                if (!model.Complete) return false;
            }
            ReplaceModel(new ModelReadAhead(_stash, key, closure, keys, model.Objects <= ReadAheadObjects));
            return true;
        }

        /// <summary>Saves the object of <paramref name="id"/>, unless the id is saved already
        /// (the first write wins). ArgumentException for a blank id or JSON.</summary>
        public void SaveObject(string id, string json)
        {
            NotBlank(id, nameof(id));
            NotBlank(json, nameof(json));
            SaveObjects(One(id, json));
        }

        /// <summary>Saves the object of <paramref name="id"/>, replacing any saved under it.</summary>
        public void UpdateObject(string id, string json)
        {
            if (id == null) throw new ArgumentNullException(nameof(id));
            if (json == null) throw new ArgumentNullException(nameof(json));
            if (!Nameable(id)) throw CannotHold(new[] { id });
            Live.SaveNamed(new[] { id }, new[] { Encoding.UTF8.GetBytes(json) });
            ReplaceModel(null);
        }

        private static IEnumerable<(string id, string json)> One(string id, string json)
        {
            yield return (id, json);
        }

        /// <summary>Saves objects under their ids, <see cref="Batch"/> per native call
        /// (hashed and compressed in parallel); an id saved already, or earlier in the same
        /// call, keeps its first object. An id no cache holds (empty, or over
        /// <see cref="MaxIdBytes"/> bytes) is refused with an ArgumentException once the
        /// rest is saved.</summary>
        public void SaveObjects(IEnumerable<(string id, string json)> items)
        {
            if (items == null) throw new ArgumentNullException(nameof(items));
            var ids = new List<string>(Batch);
            var objects = new List<string>(Batch);
            var inBatch = new HashSet<string>();
            var refused = new List<string>();
            foreach (var item in items)
            {
                if (item.id == null || item.json == null) throw new ArgumentNullException(nameof(items), "an id or a json is null");
                if (!Nameable(item.id))
                {
                    refused.Add(item.id);
                    continue;
                }
                if (!inBatch.Add(item.id)) continue;
                ids.Add(item.id);
                objects.Add(item.json);
                if (ids.Count == Batch)
                {
                    SaveNew(ids, objects);
                    ids.Clear();
                    objects.Clear();
                    inBatch.Clear();
                }
            }
            if (ids.Count > 0) SaveNew(ids, objects);
            if (refused.Count > 0) throw CannotHold(refused);
        }

        /// <summary>Saves the objects whose ids are not saved yet.</summary>
        private void SaveNew(List<string> ids, List<string> objects)
        {
            var saved = Live.Resolve(ids);
            var newIds = new List<string>(ids.Count);
            var newObjects = new List<byte[]>(ids.Count);
            for (int i = 0; i < ids.Count; i++)
            {
                if (saved[i] != null) continue;
                newIds.Add(ids[i]);
                newObjects.Add(Encoding.UTF8.GetBytes(objects[i]));
            }
            if (newIds.Count > 0) Live.SaveNamed(newIds, newObjects);
        }

        /// <summary>The longest id a cache holds, in bytes of UTF-8 (Speckle's ids are 32).</summary>
        public const int MaxIdBytes = 1024;

        private static bool Nameable(string id) =>
            id.Length > 0 && id.Length <= MaxIdBytes && Encoding.UTF8.GetByteCount(id) <= MaxIdBytes;

        private static void NotBlank(string value, string what)
        {
            if (value == null) throw new ArgumentNullException(what);
            if (string.IsNullOrWhiteSpace(value)) throw new ArgumentException("must not be blank", what);
        }

        private static ArgumentException CannotHold(IList<string> ids) =>
            new ArgumentException(ids.Count + " ids cannot be cached (an id is 1 to " + MaxIdBytes +
                " bytes of UTF-8); every other object was saved. The first: \"" +
                (ids[0].Length > 40 ? ids[0].Substring(0, 40) + "..." : ids[0]) + "\"");

        /// <summary>Whether an object is saved under <paramref name="objectId"/> (false for
        /// any string that is not an id saved).</summary>
        public bool HasObject(string objectId)
        {
            if (objectId == null) throw new ArgumentNullException(nameof(objectId));
            return Nameable(objectId) && Live.HasNamed(objectId);
        }

        /// <summary>Makes <paramref name="next"/> the model found whole last (null: none), giving back
        /// what the one before read and did not hand out.</summary>
        private void ReplaceModel(ModelReadAhead next) => Interlocked.Exchange(ref _model, next)?.Dispose();

        /// <summary>The stash, for a manager not disposed.</summary>
        private Stash Live
        {
            get
            {
                if (_disposed) throw new ObjectDisposedException(nameof(ObjstashJsonCacheManager), "the cache at " + _stash.Path + " is disposed");
                return _stash;
            }
        }

        /// <summary>Closes the stash this manager opened; a manager over a stash it was
        /// given (a factory's) commits what it saved instead, so that every process sees
        /// it once Dispose returns, and leaves the stash open.</summary>
        public void Dispose()
        {
            if (_disposed) return;
            _disposed = true;
            ReplaceModel(null);
            if (_owns) _stash.Dispose();
            else if (!_stash.IsClosed && !_stash.IsReadOnly) _stash.Flush();
        }
    }
}
