// The model a cache manager found whole last: which ids it lists, and its objects read in
// one sweep once a member is asked for. After GetObject(root) the SDK asks for every object
// of the model, one call each from several threads (DeserializeProcess); the library reads
// a model's rows in file order and decodes them in parallel (Stash.ReadModel), which costs
// far less than a lookup per object. Read at the first member asked for, not at the root: a
// send that finds a root cached skips its subtree and asks for none of it. Objects are
// handed out once and dropped (the SDK asks for each once; a second ask reads the stash).

using System;
using System.Collections.Generic;
using System.Threading;

namespace Objstash
{
    internal sealed class ModelReadAhead : IDisposable
    {
        private readonly Dictionary<string, string> _keyOfId;
        private readonly Lazy<Sweep> _sweep;

        /// <summary>A model's objects in the library's memory, and where each key's is.</summary>
        private sealed class Sweep
        {
            public NativeObjects Objects;
            public Dictionary<string, int> IndexOfKey = new Dictionary<string, int>();
        }

        /// <param name="ids">The ids the root lists, and <paramref name="keys"/> theirs.</param>
        /// <param name="read">Whether to read the objects ahead (a model small enough).</param>
        public ModelReadAhead(Stash stash, string root, IReadOnlyList<string> ids, IList<string> keys, bool read)
        {
            _keyOfId = new Dictionary<string, string>(ids.Count);
            for (int i = 0; i < ids.Count; i++) _keyOfId[ids[i]] = keys[i];
            _sweep = new Lazy<Sweep>(() =>
            {
                var sweep = new Sweep();
                if (!read) return sweep;
                sweep.Objects = stash.ReadModelKept(root);
                if (sweep.Objects == null) return sweep;
                var flat = sweep.Objects.Keys();
                for (int i = 0; i < sweep.Objects.Count; i++) sweep.IndexOfKey[Objstash.Keys.ToHex(flat, i)] = i;
                return sweep;
            }, LazyThreadSafetyMode.ExecutionAndPublication);
        }

        /// <summary>Whether the model lists <paramref name="id"/>.</summary>
        public bool Lists(string id) => _keyOfId.ContainsKey(id);

        /// <summary>The object of <paramref name="id"/> from the model's sweep (null if the
        /// model does not list it, it was handed out already, or the model was not read).</summary>
        public byte[] Take(string id)
        {
            if (!_keyOfId.TryGetValue(id, out string key)) return null;
            var sweep = _sweep.Value;
            return sweep.IndexOfKey.TryGetValue(key, out int i) ? sweep.Objects.Take(i) : null;
        }

        /// <summary>Gives back what was read and not taken.</summary>
        public void Dispose()
        {
            if (_sweep.IsValueCreated) _sweep.Value.Objects?.Dispose();
        }
    }
}
