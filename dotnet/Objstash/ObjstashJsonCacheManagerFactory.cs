// A drop-in for Speckle.Sdk's SqLiteJsonCacheManagerFactory: the members of its interface
// ISqLiteJsonCacheManagerFactory (Speckle.Sdk.SQLite), mirrored (the SDK cannot be
// referenced here). The SDK asks its factory for a new manager for every send and every
// receive and disposes it after, so a connector registers a factory of its own in its
// service collection in place of Speckle's, deriving from this one and implementing the
// SDK's interface with its two members (README, "C and C#"):
//   services.AddSingleton<ISqLiteJsonCacheManagerFactory, ObjstashCacheFactory>();

using System;
using System.IO;

namespace Objstash
{
    public class ObjstashJsonCacheManagerFactory
    {
        /// <summary>Caches under Speckle's own folder (<c>%APPDATA%/Speckle</c>, or
        /// <c>~/.config/Speckle</c>), where the SDK keeps its caches.</summary>
        public ObjstashJsonCacheManagerFactory()
            : this(Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.ApplicationData), "Speckle"))
        {
        }

        /// <summary>Caches under <paramref name="basePath"/>: a user's at
        /// <c>basePath/scope.db</c>, a project's at <c>basePath/Projects/streamId.db</c>, as
        /// the SDK lays them out under its folder.</summary>
        public ObjstashJsonCacheManagerFactory(string basePath)
        {
            if (string.IsNullOrWhiteSpace(basePath)) throw new ArgumentException("a base folder is needed", nameof(basePath));
            BasePath = basePath;
        }

        /// <summary>The folder the caches are in.</summary>
        public string BasePath { get; }

        /// <summary>A user's cache of <paramref name="scope"/> (the SDK's "Accounts").</summary>
        public ObjstashJsonCacheManager CreateForUser(string scope) => new ObjstashJsonCacheManager(UserPath(scope));

        /// <summary>The cache of a project (a stream).</summary>
        public ObjstashJsonCacheManager CreateFromStream(string streamId) => new ObjstashJsonCacheManager(StreamPath(streamId));

        /// <summary>Where a user's cache of <paramref name="scope"/> is: <c>BasePath/scope.db</c>.</summary>
        public string UserPath(string scope) => Path.Combine(BasePath, FileName(scope, nameof(scope)));

        /// <summary>Where a project's cache is: <c>BasePath/Projects/streamId.db</c>.</summary>
        public string StreamPath(string streamId) => Path.Combine(BasePath, "Projects", FileName(streamId, nameof(streamId)));

        private static string FileName(string name, string what)
        {
            if (string.IsNullOrWhiteSpace(name)) throw new ArgumentException("must not be blank", what);
            if (name.IndexOfAny(Path.GetInvalidFileNameChars()) >= 0 || name == "." || name == "..")
                throw new ArgumentException("must be usable as a file name: " + name, what);
            return name + ".db";
        }
    }
}
