// A drop-in for Speckle.Sdk's SqLiteJsonCacheManager: the members of its interface
// ISqLiteJsonCacheManager (Speckle.Sdk.SQLite), signature for signature, over objstash.
// Speckle.Sdk cannot be fetched where this was written, so the interface is mirrored, not
// referenced: a connector declares `class Cache : ObjstashJsonCacheManager,
// ISqLiteJsonCacheManager` (or wraps it) and hands it to the SDK. The interface's
// newest versions also have a `Pool` property, which is SQLite's and has no counterpart.

using System;
using System.Collections.Generic;
using System.Text;

namespace Objstash
{
    public class ObjstashJsonCacheManager : IDisposable
    {
        /// <summary>Objects saved per native call by SaveObjects.</summary>
        public const int Batch = 10000;

        private readonly Stash _stash;
        private readonly bool _owns;
        // Ids of the objects of the model read last: objects, not roots, when asked for.
        private volatile HashSet<string> _members = new HashSet<string>();

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

        /// <summary>A cache over an open stash, which Dispose leaves open.</summary>
        public ObjstashJsonCacheManager(Stash stash)
        {
            _stash = stash ?? throw new ArgumentNullException(nameof(stash));
        }

        /// <summary>The stash underneath (models, stats, verify).</summary>
        public Stash Stash => _stash;

        public string Path => _stash.Path;

        public IReadOnlyCollection<(string Id, string Json)> GetAllObjects()
        {
            var names = _stash.Names();
            var all = new List<(string Id, string Json)>(names.Count);
            for (int start = 0; start < names.Count; start += Batch)
            {
                int n = Math.Min(Batch, names.Count - start);
                var keys = new string[n];
                for (int i = 0; i < n; i++) keys[i] = names[start + i].Key;
                var objects = _stash.GetMany(keys);
                for (int i = 0; i < n; i++)
                    if (objects[i] != null) all.Add((names[start + i].Name, Encoding.UTF8.GetString(objects[i])));
            }
            return all;
        }

        public void DeleteObject(string id)
        {
            if (id == null) throw new ArgumentNullException(nameof(id));
            var key = _stash.Resolve(new[] { id })[0];
            if (key != null) _stash.Remove(new[] { key });
        }

        /// <summary>The object saved under <paramref name="id"/>, or null. An object that
        /// lists children (a <c>__closure</c>) is returned only with every one of them
        /// cached (and is from then on kept and evicted with them), so that a receive that
        /// trusts a cached root never gets part of a model.</summary>
        public string GetObject(string id)
        {
            if (id == null) throw new ArgumentNullException(nameof(id));
            var data = _stash.GetNamed(id);
            if (data == null) return null;
            string json = Encoding.UTF8.GetString(data);
            if (json.IndexOf("\"__closure\"", StringComparison.Ordinal) < 0 || _members.Contains(id))
                return json;
            return WholeModel(id, json) ? json : null;
        }

        /// <summary>Whether the object of <paramref name="id"/>, which lists children, comes
        /// with all of them: a complete model, or a closure all cached (then declared one).</summary>
        private bool WholeModel(string id, string json)
        {
            var key = _stash.Resolve(new[] { id })[0];
            if (key == null) return false;
            var closure = Closure.Ids(json);
            var model = _stash.GetModel(key);
            if (model == null || !model.Complete)
            {
                var keys = _stash.Resolve(closure);
                foreach (var k in keys)
                    if (k == null) return false;
                foreach (var missing in _stash.Missing(keys))
                    if (missing) return false;
                if (!_stash.IsReadOnly && !_stash.DeclareModel(key, keys, id).Complete) return false;
            }
            _members = new HashSet<string>(closure);
            return true;
        }

        public void SaveObject(string id, string json) => SaveObjects(One(id, json));

        /// <summary>As SaveObject: an id saved again points to its new object.</summary>
        public void UpdateObject(string id, string json) => SaveObjects(One(id, json));

        private static IEnumerable<(string id, string json)> One(string id, string json)
        {
            yield return (id, json);
        }

        /// <summary>Saves objects under their ids, <see cref="Batch"/> per native call
        /// (hashed and compressed in parallel).</summary>
        public void SaveObjects(IEnumerable<(string id, string json)> items)
        {
            if (items == null) throw new ArgumentNullException(nameof(items));
            var ids = new List<string>(Batch);
            var objects = new List<byte[]>(Batch);
            foreach (var item in items)
            {
                if (item.id == null || item.json == null) throw new ArgumentNullException(nameof(items), "an id or a json is null");
                ids.Add(item.id);
                objects.Add(Encoding.UTF8.GetBytes(item.json));
                if (ids.Count == Batch)
                {
                    _stash.SaveNamed(ids, objects);
                    ids.Clear();
                    objects.Clear();
                }
            }
            if (ids.Count > 0) _stash.SaveNamed(ids, objects);
        }

        public bool HasObject(string objectId)
        {
            if (objectId == null) throw new ArgumentNullException(nameof(objectId));
            return _stash.HasNamed(objectId);
        }

        public void Dispose()
        {
            if (_owns) _stash.Dispose();
        }
    }

    /// <summary>The ids a Speckle object's <c>__closure</c> lists, read without a JSON
    /// library (netstandard2.0 has none): <c>"__closure":{"id":depth,...}</c>.</summary>
    internal static class Closure
    {
        public static List<string> Ids(string json)
        {
            var ids = new List<string>();
            int at = json.IndexOf("\"__closure\"", StringComparison.Ordinal);
            if (at < 0) return ids;
            at += "\"__closure\"".Length;
            at = Skip(json, at);
            if (at >= json.Length || json[at] != ':') return ids;
            at = Skip(json, at + 1);
            if (at >= json.Length || json[at] != '{') return ids;
            at = Skip(json, at + 1);
            while (at < json.Length && json[at] == '"')
            {
                int end = json.IndexOf('"', at + 1);
                if (end < 0) break;
                ids.Add(json.Substring(at + 1, end - at - 1));
                at = Skip(json, end + 1);
                if (at >= json.Length || json[at] != ':') break;
                at = Skip(json, at + 1);
                while (at < json.Length && (char.IsDigit(json[at]) || json[at] == '-' || json[at] == '.')) at++;
                at = Skip(json, at);
                if (at < json.Length && json[at] == ',') at = Skip(json, at + 1);
            }
            return ids;
        }

        private static int Skip(string s, int at)
        {
            while (at < s.Length && char.IsWhiteSpace(s[at])) at++;
            return at;
        }
    }
}
