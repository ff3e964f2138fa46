// The .NET binding under Mono (.NET Framework 4.x): every member of the cache manager and
// of Stash, threads, a second process, bad input, dispose twice, models whole or absent
// after eviction. Built and run by dotnet/run-tests.sh (./test.sh runs it); prints
// "N passed, N failed" and exits 1 on any failure.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using Objstash;

// Speckle.Sdk's two interfaces (Speckle.Sdk.SQLite), mirrored member for member, and the
// README's two classes over them: the README's snippet compiles against the SDK's shape.
interface ISqLiteJsonCacheManager : IDisposable
{
    IReadOnlyCollection<(string Id, string Json)> GetAllObjects();
    void DeleteObject(string id);
    string GetObject(string id);
    void SaveObject(string id, string json);
    void UpdateObject(string id, string json);
    void SaveObjects(IEnumerable<(string id, string json)> items);
    bool HasObject(string objectId);
}

interface ISqLiteJsonCacheManagerFactory
{
    ISqLiteJsonCacheManager CreateForUser(string scope);
    ISqLiteJsonCacheManager CreateFromStream(string streamId);
}

class ObjstashCache : ObjstashJsonCacheManager, ISqLiteJsonCacheManager
{
    public ObjstashCache(Stash stash) : base(stash) { }
}

class ObjstashCacheFactory : ObjstashJsonCacheManagerFactory, ISqLiteJsonCacheManagerFactory
{
    public ObjstashCacheFactory(string basePath) : base(basePath) { }
    ISqLiteJsonCacheManager ISqLiteJsonCacheManagerFactory.CreateForUser(string scope) =>
        new ObjstashCache(StashAt(UserPath(scope)));
    ISqLiteJsonCacheManager ISqLiteJsonCacheManagerFactory.CreateFromStream(string streamId) =>
        new ObjstashCache(StashAt(StreamPath(streamId)));
}

static class Tests
{
    static int passed, failed;

    static void Check(bool ok, string what)
    {
        if (ok) { passed++; return; }
        failed++;
        Console.Error.WriteLine("failed: " + what);
    }

    static void Throws<T>(Action action, string what, Func<T, bool> also = null) where T : Exception
    {
        try
        {
            action();
            Check(false, what + ": no exception");
        }
        catch (T e)
        {
            Check(also == null || also(e), what + ": " + e.Message);
        }
        catch (Exception e)
        {
            Check(false, what + ": " + e.GetType().Name + ": " + e.Message);
        }
    }

    static string dir;

    static string PathOf(string name) => Path.Combine(dir, name);

    static byte[] Utf8(string s) => Encoding.UTF8.GetBytes(s);

    /// <summary>A Speckle-shaped object: its id is a hash of its content.</summary>
    static (string id, string json) Obj(int seed, int i, string extra = "")
    {
        string body = "{\"speckle_type\":\"Objects.Geometry.Point\",\"x\":" + i + ",\"y\":" + seed + extra;
        string id = Stash.KeyOf(Utf8(body)).Substring(0, 32);
        return (id, body + ",\"id\":\"" + id + "\"}");
    }

    static void CacheManagerMembers()
    {
        string path = PathOf("members.db");
        var cache = new ObjstashJsonCacheManager(path);
        Check(cache.Path == path, "Path");
        var a = Obj(1, 1);
        cache.SaveObject(a.id, a.json);
        Check(cache.GetObject(a.id) == a.json, "GetObject after SaveObject");
        Check(cache.HasObject(a.id), "HasObject");
        Check(!cache.HasObject("0123456789abcdef0123456789abcdef"), "HasObject of an unknown id");
        Check(cache.GetObject("0123456789abcdef0123456789abcdef") == null, "GetObject of an unknown id");
        cache.UpdateObject(a.id, "{\"updated\":true}");
        Check(cache.GetObject(a.id) == "{\"updated\":true}", "UpdateObject");
        var many = Enumerable.Range(0, 25000).Select(i => Obj(2, i)).ToList();
        cache.SaveObjects(many);
        Check(many.All(o => cache.GetObject(o.id) == o.json), "SaveObjects across batches, each read back");
        var all = cache.GetAllObjects();
        Check(all.Count == 25001, "GetAllObjects counts " + all.Count);
        Check(all.Any(x => x.Item1 == many[777].id && x.Item2 == many[777].json), "GetAllObjects holds each"); // Item1/Item2: mcs does not read tuple names from another assembly
        Check(many.All(o => all.Contains((o.id, o.json))), "GetAllObjects: every id with its JSON");
        // Text beyond ASCII and beyond the Basic Multilingual Plane, as the SDK's own tests use.
        const string odd = "spécial_字符_!@#$%^&*()", oddJson = "{\"name\":\"Bürogebäude 🏢 𝔘\"}";
        cache.SaveObject(odd, oddJson);
        Check(cache.GetAllObjects().Any(x => x.Item1 == odd && x.Item2 == oddJson), "GetAllObjects keeps every character");
        cache.DeleteObject(odd);
        cache.DeleteObject(many[5].id);
        Check(!cache.HasObject(many[5].id) && cache.GetObject(many[5].id) == null, "DeleteObject");
        cache.DeleteObject("not an id that is saved");
        cache.Dispose();
        cache.Dispose(); // twice is fine
        Throws<ObjectDisposedException>(() => cache.GetObject(a.id), "a disposed cache");
        using (var again = new ObjstashJsonCacheManager(path))
            Check(again.GetObject(many[9].id) == many[9].json, "reopened, everything is there");
    }

    static void StashRoundTrip()
    {
        using (var s = Stash.Open(PathOf("stash.db"), new StashOptions { Layout = "bucketed", Durability = "safe" }))
        {
            string key = s.Save(Utf8("{\"wall\":17}"));
            Check(key == Stash.KeyOf(Utf8("{\"wall\":17}")) && key.Length == 64, "Save and KeyOf");
            Check(Encoding.UTF8.GetString(s.Get(key)) == "{\"wall\":17}", "Get");
            var keys = s.SaveAll(new[] { Utf8("a"), new byte[0], Utf8("c") });
            var got = s.GetMany(new[] { keys[0], keys[1], Stash.KeyOf(Utf8("never")) });
            Check(got[0].Length == 1 && got[1] != null && got[1].Length == 0 && got[2] == null, "GetMany: present, empty, absent");
            Check(s.Contains(keys[2]) && s.Missing(new[] { keys[2], Stash.KeyOf(Utf8("never")) }).SequenceEqual(new[] { false, true }), "Contains and Missing");
            Check(s.Remove(new[] { keys[2], keys[2] }).SequenceEqual(new[] { true, false }), "Remove");
            s.SaveNamed(new[] { "wall-17", "beam-3" }, new[] { Utf8("{\"w\":17}"), Utf8("{\"b\":3}") });
            Check(Encoding.UTF8.GetString(s.GetNamed(new[] { "beam-3" })[0]) == "{\"b\":3}", "GetNamed");
            Check(s.Resolve(new[] { "wall-17", "nope" })[1] == null, "Resolve");
            Check(s.Names().Count == 2, "Names");
            Check(s.RemoveNamed(new[] { "beam-3" })[0], "RemoveNamed");
            s.Flush();
            var stats = s.Stats();
            Check(stats.Objects == 5 && stats.Names == 1 && stats.FileBytes > 0, "Stats " + stats.Objects);
            var report = s.Verify();
            Check(report.Ok && report.Checked == 5 && report.Text.Contains("5 objects"), "Verify: " + report.Text);
            // Counted: Get, GetMany (2 of 3), GetNamed; Contains and Missing; six saves.
            var counters = s.Counters();
            Check(counters.Hits == 4 && counters.Misses == 1 && counters.HitRate == 0.8
                && counters.Found == 2 && counters.Absent == 1 && counters.Saved == 6
                && counters.SavedAgain == 0 && counters.Since != null,
                "Counters: " + counters.Hits + " " + counters.Misses + " " + counters.Found + " " + counters.Absent + " " + counters.Saved);
            Check(s.HandleCounters().Hits == 4, "HandleCounters");
            s.ResetCounters();
            Check(s.Counters().Hits == 0 && s.Counters().HitRate == null && s.HandleCounters().Hits == 4, "ResetCounters");
            Check(!s.IsReadOnly, "IsReadOnly");
        }
        string text = Stash.Repair(PathOf("stash.db"), out bool lost);
        Check(!lost && text.Length > 0, "Repair of a sound stash: " + text);
        Check(Stash.Version.Length > 0, "Version");
    }

    static void Threads()
    {
        using (var cache = new ObjstashJsonCacheManager(PathOf("threads.db")))
        {
            int errors = 0;
            var threads = Enumerable.Range(0, 8).Select(t => new Thread(() =>
            {
                for (int i = 0; i < 500; i++)
                {
                    var o = Obj(100 + t, i);
                    cache.SaveObject(o.id, o.json);
                    if (cache.GetObject(o.id) != o.json || !cache.HasObject(o.id)) Interlocked.Increment(ref errors);
                }
            })).ToList();
            threads.ForEach(th => th.Start());
            threads.ForEach(th => th.Join());
            Check(errors == 0, "8 threads saving and reading: " + errors + " errors");
            Check(cache.GetAllObjects().Count == 4000, "4,000 objects from 8 threads");
        }
    }

    static void SecondProcess(string self)
    {
        string path = PathOf("shared.db");
        using (var cache = new ObjstashJsonCacheManager(path))
        {
            var mine = Obj(200, 1);
            cache.SaveObject(mine.id, mine.json);
            var child = Process.Start(new ProcessStartInfo("mono", "\"" + self + "\" --child \"" + path + "\"")
            {
                UseShellExecute = false,
            });
            for (int i = 0; i < 1000; i++)
            {
                var o = Obj(201, i);
                cache.SaveObject(o.id, o.json);
            }
            child.WaitForExit();
            Check(child.ExitCode == 0, "the second process saved its objects");
            var theirs = Obj(202, 999);
            Check(cache.GetObject(theirs.id) == theirs.json, "an object of the second process, read here");
            Check(cache.GetAllObjects().Count == 2001, "both processes' objects");
        }
    }

    static int Child(string path)
    {
        using (var cache = new ObjstashJsonCacheManager(path))
            cache.SaveObjects(Enumerable.Range(0, 1000).Select(i => Obj(202, i)));
        return 0;
    }

    static void BadInput()
    {
        Throws<ArgumentNullException>(() => Stash.Open(null), "a null path");
        Throws<ArgumentException>(() => Stash.Open(PathOf("bad.db"), new StashOptions { Codec = "lzma" }), "an unknown codec");
        Throws<ObjstashException>(() => Stash.Open(PathOf("absent.db"), new StashOptions { MustExist = true }), "a stash that is not there",
            e => e.Status == ObjstashStatus.NotFound);
        File.WriteAllText(PathOf("notes.txt"), "not a database");
        Throws<ObjstashException>(() => new ObjstashJsonCacheManager(PathOf("notes.txt")), "a file that is not a stash",
            e => e.Status == ObjstashStatus.NotAStash);
        Check(File.ReadAllText(PathOf("notes.txt")) == "not a database", "the foreign file is untouched");
        using (var s = Stash.Open(PathOf("bad.db")))
        {
            Throws<ObjstashException>(() => s.Get("abc"), "a key that is not 64 hex digits", e => e.Status == ObjstashStatus.InvalidArgument);
            Throws<ArgumentNullException>(() => s.Get(null), "a null key");
            Throws<ArgumentNullException>(() => s.SaveAll(new byte[][] { Utf8("x"), null }), "a null object");
            Throws<ObjstashException>(() => s.SaveNamed(new[] { "" }, new[] { Utf8("x") }), "an empty name",
                e => e.Status == ObjstashStatus.InvalidArgument);
            Check(s.Stats().Objects == 0, "nothing of a refused call was stored");
            var cache = new ObjstashJsonCacheManager(s);
            Throws<ArgumentNullException>(() => cache.SaveObject(null, "{}"), "a null id");
            Throws<ArgumentNullException>(() => cache.GetObject(null), "GetObject(null)");
            cache.Dispose(); // leaves the stash open
            Check(s.Stats().Objects == 0, "the stash outlives a cache over it");
        }
        var closed = Stash.Open(PathOf("bad.db"));
        closed.Dispose();
        closed.Dispose();
        Throws<ObjectDisposedException>(() => closed.Flush(), "a disposed stash");
        using (var ro = Stash.Open(PathOf("bad.db"), new StashOptions { ReadOnly = true }))
            Throws<ObjstashException>(() => ro.Save(Utf8("x")), "a save on a read-only handle", e => e.Status == ObjstashStatus.ReadOnly);
    }

    static void ModelsAfterEviction()
    {
        using (var s = Stash.Open(PathOf("models.db"), new StashOptions { NoEvictionGrace = true }))
        {
            var models = new List<(string root, List<byte[]> members)>();
            for (int m = 0; m < 3; m++)
            {
                var members = Enumerable.Range(0, 2000).Select(i => Utf8(Obj(300 + m, i, ",\"pad\":\"" + new string('x', 400) + "\"").json)).ToList();
                var model = s.SaveModel(Utf8("{\"root\":" + m + "}"), members, "model " + m);
                Check(model.Complete && model.Objects == 2001 && model.Name == "model " + m, "SaveModel " + m);
                models.Add((model.Root, members));
            }
            Check(s.PinModel(models[2].root), "PinModel");
            var read = s.ReadModel(models[0].root);
            Check(read != null && read.Count == 2001, "ReadModel whole");
            ulong evicted = s.TrimTo(1);
            Check(evicted > 0, "TrimTo evicted " + evicted);
            foreach (var model in models)
            {
                string root = model.root;
                var members = model.members;
                var whole = s.ReadModel(root);
                var rootRead = s.Get(root);
                if (whole == null)
                {
                    Check(rootRead == null, "an evicted model's root reads as absent");
                }
                else
                {
                    var keys = members.Select(Stash.KeyOf).ToList();
                    Check(rootRead != null && s.Missing(keys).All(x => !x) && whole.Count == 2001, "a kept model is whole");
                }
            }
            Check(s.GetModel(models[2].root).Pinned && s.ReadModel(models[2].root) != null, "the pinned model stayed");
            Check(s.UnpinModel(models[2].root) && s.RemoveModel(models[2].root), "UnpinModel and RemoveModel");
            Check(s.GetModel(models[2].root) == null, "removed");
            // Declared over stored objects with one missing: the root reads as absent.
            string loose = s.Save(Utf8("{\"loose root\":1}"));
            var declared = s.DeclareModel(loose, new[] { Stash.KeyOf(Utf8("not stored")) });
            Check(declared.Missing == 1 && s.Get(loose) == null, "a declared model missing an object hides its root");
        }
        // Through the cache manager: a root whose closure is not all cached is not returned.
        using (var cache = new ObjstashJsonCacheManager(PathOf("closure.db")))
        {
            var children = Enumerable.Range(0, 50).Select(i => Obj(400, i)).ToList();
            string closure = string.Join(",", children.Select(c => "\"" + c.id + "\":1"));
            var root = Obj(401, 0, ",\"__closure\":{" + closure + "}");
            cache.SaveObjects(children.Skip(1).Concat(new[] { root }));
            Check(cache.GetObject(root.id) == null, "a root without its whole closure reads as absent");
            cache.SaveObject(children[0].id, children[0].json);
            Check(cache.GetObject(root.id) == root.json, "with its closure whole, the root is there");
            var key = cache.Stash.Resolve(new[] { root.id })[0];
            Check(cache.Stash.GetModel(key) != null && cache.Stash.GetModel(key).Complete, "and it is kept as a model");
            cache.DeleteObject(children[7].id);
            Check(cache.GetObject(root.id) == null, "a child deleted: the root reads as absent again");
        }
    }

    // JSON as Speckle's serializers write it, generated here the way they build it:
    // - V2 (in the speckle-sharp-sdk repository: ObjectSerializer, Serialisation/V2/Send):
    //   each detached child is written inline as
    //   {"speckle_type":"reference","referencedId":ID,"__closure":null},
    //   and the object's own "__closure":{ID:depth} comes last;
    // - a reused reference (the SDK's ObjectReference type) carries its own
    //   closure map inline;
    // - V1 (speckle-sharp-sdk's SpeckleObjectSerializer)
    //   lists blob ids as "blob:<hash>".
    static (string id, string json) O(string id, string json) => (id, json);

    static string Reference(string id, string closure = null) =>
        "{\"speckle_type\":\"reference\",\"referencedId\":\"" + id + "\",\"__closure\":" + (closure ?? "null") + "}";

    static (string id, string json) SdkRoot(int seed, IList<(string id, string json)> children, string extraClosure = "", string inline = "")
    {
        string refs = string.Join(",", children.Select(c => Reference(c.id)));
        string closure = string.Join(",", children.Select(c => "\"" + c.id + "\":1")) + extraClosure;
        string body = "{\"speckle_type\":\"Speckle.Core.Models.Collection\",\"name\":\"r" + seed + "\",\"elements\":[" + refs + "]" + inline;
        string id = Stash.KeyOf(Utf8(body)).Substring(0, 32);
        return (id, body + ",\"id\":\"" + id + "\",\"__closure\":{" + closure + "}}");
    }

    /// <summary>#75: the closure is the root's own, as the SDK writes it; each id is deleted
    /// alone; blob ids are no members; Speckle's argument rules.</summary>
    static void SdkSemantics()
    {
        using (var cache = new ObjstashJsonCacheManager(PathOf("sdk.db"), new StashOptions { NoEvictionGrace = true }))
        {
            // 1. A root whose first "__closure" in the text is a child reference's null.
            var children = Enumerable.Range(0, 2000).Select(i => Obj(500, i, ",\"pad\":\"" + new string('p', 200) + "\"")).ToList();
            var root = SdkRoot(500, children);
            cache.SaveObject(root.id, root.json);
            Check(cache.GetObject(root.id) == null, "an SDK-written root with no child cached reads as absent");
            cache.SaveObjects(children);
            Check(cache.GetObject(root.id) == root.json, "with every child cached, the root reads");
            Check(children.All(c => cache.GetObject(c.id) == c.json), "every child, from the model's one sweep");
            Check(cache.GetObject(children[0].id) == children[0].json, "a child asked again, from the stash");
            using (var noSweep = new ObjstashJsonCacheManager(cache.Stash) { ReadAheadObjects = 0 })
            {
                Check(noSweep.GetObject(root.id) == root.json, "a model over the read-ahead limit: the root");
                Check(children.All(c => noSweep.GetObject(c.id) == c.json), "and its children, one by one");
            }
            cache.DeleteObject(children[3].id);
            Check(cache.GetObject(root.id) == null, "a child deleted: the root reads as absent");
            cache.SaveObject(children[3].id, children[3].json);
            Check(cache.GetObject(root.id) == root.json, "the child saved again: the root reads");
            cache.Stash.TrimTo(1);
            int left = children.Count(c => cache.HasObject(c.id));
            Check(left == 0 || left == children.Count, "a trim evicts the model whole: " + left + " of 2000 children left");
            Check(cache.GetObject(root.id) == null || left == children.Count, "a trimmed model's root reads as absent");
            // An inline ObjectReference's map is not the root's closure.
            var kids = Enumerable.Range(0, 10).Select(i => Obj(501, i)).ToList();
            var withRef = SdkRoot(501, kids, "", ",\"reused\":" + Reference(kids[0].id, "{\"" + kids[0].id + "\":1}"));
            var items = new List<(string id, string json)>(kids.Skip(1));
            items.Add(withRef);
            cache.SaveObjects(items);
            Check(cache.GetObject(withRef.id) == null, "an inline reference's map is not the root's closure");
            cache.SaveObject(kids[0].id, kids[0].json);
            Check(cache.GetObject(withRef.id) == withRef.json, "the root's own closure whole: it reads");
            // 3. Blob ids (V1 closures) are files, not cached objects: no members.
            var leaves = Enumerable.Range(0, 5).Select(i => Obj(503, i)).ToList();
            var v1 = SdkRoot(503, leaves, ",\"blob:9f86d081884c7d659a2feaa0c55ad015\":1");
            var v1Items = new List<(string id, string json)>(leaves);
            v1Items.Add(v1);
            cache.SaveObjects(v1Items);
            Check(cache.GetObject(v1.id) == v1.json, "a closure with a blob id reads once its objects are cached");
            Check(Stash.ClosureIds(Utf8(v1.json)).Count == 5, "the library's parser leaves blob ids out");
        }
        using (var cache = new ObjstashJsonCacheManager(PathOf("semantics.db")))
        {
            // 2. Two ids with byte-identical JSON: deleting one leaves the other.
            cache.SaveObjects(new List<(string id, string json)> { O("id1", "{\"same\":1}"), O("id2", "{\"same\":1}") });
            cache.DeleteObject("id1");
            Check(cache.GetObject("id1") == null && !cache.HasObject("id1"), "the deleted id is gone");
            Check(cache.GetObject("id2") == "{\"same\":1}" && cache.HasObject("id2"), "the other id with the same JSON stays");
            // 4. The first write wins; UpdateObject replaces.
            cache.SaveObject("first", "{\"v\":1}");
            cache.SaveObject("first", "{\"v\":2}");
            cache.SaveObjects(new List<(string id, string json)> { O("first", "{\"v\":3}"), O("dup", "{\"d\":1}"), O("dup", "{\"d\":2}") });
            Check(cache.GetObject("first") == "{\"v\":1}", "SaveObject and SaveObjects keep the first write: " + cache.GetObject("first"));
            Check(cache.GetObject("dup") == "{\"d\":1}", "within one batch the first write wins: " + cache.GetObject("dup"));
            cache.UpdateObject("first", "{\"v\":4}");
            Check(cache.GetObject("first") == "{\"v\":4}", "UpdateObject replaces");
            // The SDK's own test data.
            string odd = "spécial_字符_!@#$%^&*()";
            string big = "{\"s\":\"" + new string('z', 100000) + "\"}";
            cache.SaveObject(odd, "1");
            cache.SaveObject("id100k", big);
            Check(cache.GetObject(odd) == "1" && cache.HasObject(odd), "an id of any characters, JSON \"1\"");
            Check(cache.GetObject("id100k") == big, "a value of 100,000 characters");
            // Blank ids or JSON: ArgumentException, as Speckle's.
            foreach (var blank in new[] { ("", "{}"), ("  ", "{}"), ("x", ""), ("x", " ") })
                Throws<ArgumentException>(() => cache.SaveObject(blank.Item1, blank.Item2), "SaveObject(\"" + blank.Item1 + "\", \"" + blank.Item2 + "\")");
            // GetObject and HasObject of any string answer null and false.
            foreach (var id in new[] { "", " ", new string('L', 5000), "never saved" })
            {
                Check(cache.GetObject(id) == null, "GetObject of " + id.Length + " chars is null");
                Check(!cache.HasObject(id), "HasObject of " + id.Length + " chars is false");
            }
            // One id the cache cannot hold does not cost the rest of its batch.
            var batch = new List<(string id, string json)> { O("ok-a", "{\"a\":1}"), O("", "{\"b\":1}"), O("ok-c", "{\"c\":1}") };
            Throws<ArgumentException>(() => cache.SaveObjects(batch), "SaveObjects with an empty id says so");
            Check(cache.HasObject("ok-a") && cache.HasObject("ok-c"), "and saves the rest of the batch");
        }
    }

    /// <summary>#75: the factory at Speckle's paths, one handle a file for its life.</summary>
    static void Factory()
    {
        string root = PathOf("speckle-home");
        var factory = new ObjstashJsonCacheManagerFactory(root);
        var user = factory.CreateForUser("Accounts");
        Check(user.Path == Path.Combine(root, "Accounts.db"), "CreateForUser at <base>/<scope>.db: " + user.Path);
        user.SaveObject("acc", "{\"token\":1}");
        user.Dispose();
        Throws<ObjectDisposedException>(() => user.GetObject("acc"), "a disposed manager");
        // Disposed, the manager committed what it saved: another handle sees it.
        using (var other = Stash.Open(user.Path))
            Check(other.GetNamed("acc") != null, "a manager's Dispose commits its saves");
        using (var stream = factory.CreateFromStream("a1b2c3"))
        {
            Check(stream.Path == Path.Combine(root, "Projects", "a1b2c3.db"), "CreateFromStream at <base>/Projects/<id>.db: " + stream.Path);
            stream.SaveObject("o", "{}");
        }
        using (var again = factory.CreateForUser("Accounts"))
        {
            Check(again.GetObject("acc") == "{\"token\":1}", "a manager per operation finds what the last one saved");
            Check(ReferenceEquals(again.Stash, factory.CreateForUser("Accounts").Stash), "managers of one file share the factory's handle");
        }
        Throws<ArgumentException>(() => factory.CreateFromStream(" "), "a blank stream id");
        Check(new ObjstashJsonCacheManagerFactory().BasePath.EndsWith("Speckle"), "the default base is Speckle's folder");
        // Through the SDK's interfaces, as a connector registers it.
        using (var sdkFactory = new ObjstashCacheFactory(root))
        {
            ISqLiteJsonCacheManagerFactory sdk = sdkFactory;
            using (var viaSdk = sdk.CreateFromStream("a1b2c3"))
                Check(viaSdk.GetObject("o") == "{}" && viaSdk.HasObject("o"), "the SDK's factory interface finds the project's cache");
        }
        var kept = factory.CreateForUser("Accounts").Stash;
        factory.Dispose();
        Check(kept.IsClosed, "disposing the factory closes its handles");
        Throws<ObjectDisposedException>(() => factory.CreateForUser("Accounts"), "a disposed factory");
    }

    static int Main(string[] args)
    {
        if (args.Length == 2 && args[0] == "--child") return Child(args[1]);
        dir = Path.Combine(Path.GetTempPath(), "objstash-dotnet-" + Guid.NewGuid().ToString("N"));
        Directory.CreateDirectory(dir);
        string self = typeof(Tests).Assembly.Location;
        var parts = new (string, Action)[]
        {
            ("the cache manager's members", CacheManagerMembers),
            ("Stash", StashRoundTrip),
            ("threads", Threads),
            ("a second process", () => SecondProcess(self)),
            ("bad input", BadInput),
            ("models after eviction", ModelsAfterEviction),
            ("Speckle's SDK as it calls", SdkSemantics),
            ("the factory", Factory),
        };
        foreach (var part in parts)
        {
            try { part.Item2(); }
            catch (Exception e) { Check(false, part.Item1 + ": " + e); }
        }
        try { Directory.Delete(dir, true); } catch (IOException) { }
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
