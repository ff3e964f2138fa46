// The model a cache manager found whole last: which ids it lists, and its objects read in
// one sweep once a member is asked for. After GetObject(root) the SDK asks for every object
// of the model, one call each from several threads (DeserializeProcess); the library reads
// a model's rows in file order and decodes them in parallel (Stash.ReadModel), which costs
// far less than a lookup per object. Read at the first member asked for, not at the root: a
// send that finds a root cached skips its subtree and asks for none of it. Objects are
// handed out once and dropped (the SDK asks for each once; a second ask reads the stash).

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;

namespace Objstash
{
    internal sealed class ModelReadAhead
    {
        private readonly Dictionary<string, string> _keyOfId;
        private readonly Lazy<ConcurrentDictionary<string, byte[]>> _objects;

        /// <param name="ids">The ids the root lists, and <paramref name="keys"/> theirs.</param>
        /// <param name="read">Whether to read the objects ahead (a model small enough).</param>
        public ModelReadAhead(Stash stash, string root, IReadOnlyList<string> ids, IList<string> keys, bool read)
        {
            _keyOfId = new Dictionary<string, string>(ids.Count);
            for (int i = 0; i < ids.Count; i++) _keyOfId[ids[i]] = keys[i];
            _objects = new Lazy<ConcurrentDictionary<string, byte[]>>(() =>
            {
                var objects = new ConcurrentDictionary<string, byte[]>();
                if (!read) return objects;
                var whole = stash.ReadModel(root);
                if (whole == null) return objects;
                foreach (var entry in whole) objects[entry.Item1] = entry.Item2;
                return objects;
            }, LazyThreadSafetyMode.ExecutionAndPublication);
        }

        /// <summary>Whether the model lists <paramref name="id"/>.</summary>
        public bool Lists(string id) => _keyOfId.ContainsKey(id);

        /// <summary>The object of <paramref name="id"/> from the model's sweep (null if the
        /// model does not list it, it was handed out already, or the model was not read).</summary>
        public byte[] Take(string id)
        {
            if (!_keyOfId.TryGetValue(id, out string key)) return null;
            return _objects.Value.TryRemove(key, out byte[] data) ? data : null;
        }
    }
}
