// A drop-in for Speckle.Sdk's SqLiteJsonCacheManagerFactory: the members of its interface
// ISqLiteJsonCacheManagerFactory (Speckle.Sdk.SQLite), mirrored (the SDK cannot be
// referenced here). The SDK asks its factory for a new manager for every send and every
// receive and disposes it after. A stash handle is made to live long and to be shared by
// threads, so this factory keeps one open per file for its own life and hands out managers
// over it: a manager costs no open, and its Dispose commits what it saved (every process
// sees it then) and leaves the handle open. Dispose the factory to close them (a singleton
// in a service collection is disposed with it). A connector registers a factory of its own
// in place of Speckle's, deriving from this one and implementing the SDK's interface with
// its two members (README, "C and C#"):
//   services.AddSingleton<ISqLiteJsonCacheManagerFactory, ObjstashCacheFactory>();

using System;
using System.Collections.Generic;
using System.IO;

namespace Objstash
{
    public class ObjstashJsonCacheManagerFactory : IDisposable
    {
        private readonly Dictionary<string, Stash> _open = new Dictionary<string, Stash>();
        private readonly StashOptions _options;
        private bool _disposed;

        /// <summary>Caches under Speckle's own folder (<c>%APPDATA%/Speckle</c>, or
        /// <c>~/.config/Speckle</c>), where the SDK keeps its caches.</summary>
        public ObjstashJsonCacheManagerFactory()
            : this(Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.ApplicationData), "Speckle"))
        {
        }

        /// <summary>Caches under <paramref name="basePath"/>: a user's at
        /// <c>basePath/scope.db</c>, a project's at <c>basePath/Projects/streamId.db</c>, as
        /// the SDK lays them out under its folder; opened with <paramref name="options"/>
        /// (default: <see cref="ObjstashJsonCacheManager.DefaultOptions"/>).</summary>
        public ObjstashJsonCacheManagerFactory(string basePath, StashOptions options = null)
        {
            if (string.IsNullOrWhiteSpace(basePath)) throw new ArgumentException("a base folder is needed", nameof(basePath));
            BasePath = basePath;
            _options = options;
        }

        /// <summary>The folder the caches are in.</summary>
        public string BasePath { get; }

        /// <summary>A user's cache of <paramref name="scope"/> (the SDK's "Accounts").</summary>
        public ObjstashJsonCacheManager CreateForUser(string scope) => new ObjstashJsonCacheManager(StashAt(UserPath(scope)));

        /// <summary>The cache of a project (a stream).</summary>
        public ObjstashJsonCacheManager CreateFromStream(string streamId) => new ObjstashJsonCacheManager(StashAt(StreamPath(streamId)));

        /// <summary>Where a user's cache of <paramref name="scope"/> is: <c>BasePath/scope.db</c>.</summary>
        public string UserPath(string scope) => Path.Combine(BasePath, FileName(scope, nameof(scope)));

        /// <summary>Where a project's cache is: <c>BasePath/Projects/streamId.db</c>.</summary>
        public string StreamPath(string streamId) => Path.Combine(BasePath, "Projects", FileName(streamId, nameof(streamId)));

        /// <summary>The handle this factory keeps open on the stash at
        /// <paramref name="path"/>, opened at the first ask: what a manager of a connector's
        /// own type is made over (<c>new ObjstashCache(StashAt(path))</c>).</summary>
        public Stash StashAt(string path)
        {
            string full = Path.GetFullPath(path);
            lock (_open)
            {
                if (_disposed) throw new ObjectDisposedException(nameof(ObjstashJsonCacheManagerFactory));
                if (_open.TryGetValue(full, out Stash stash) && !stash.IsClosed) return stash;
                stash = Stash.Open(full, _options ?? ObjstashJsonCacheManager.DefaultOptions());
                _open[full] = stash;
                return stash;
            }
        }

        /// <summary>Closes every stash this factory opened; managers made over them fail
        /// from then on.</summary>
        public void Dispose()
        {
            List<Stash> open;
            lock (_open)
            {
                if (_disposed) return;
                _disposed = true;
                open = new List<Stash>(_open.Values);
                _open.Clear();
            }
            foreach (var stash in open) stash.Dispose();
        }

        private static string FileName(string name, string what)
        {
            if (string.IsNullOrWhiteSpace(name)) throw new ArgumentException("must not be blank", what);
            if (name.IndexOfAny(Path.GetInvalidFileNameChars()) >= 0 || name == "." || name == "..")
                throw new ArgumentException("must be usable as a file name: " + name, what);
            return name + ".db";
        }
    }
}
