// Speckle's SDK as it calls its cache, replayed against objstash and against Speckle's own
// cache design, side by side in one run, the two alternating round by round. The calls are
// those of speckle-sharp-sdk (src/Speckle.Sdk), with a new manager opened and disposed for
// every operation, as its factory is used:
// - a fresh receive (ObjectLoader, DeserializeProcess): GetObject(root) misses; HasObject
//   over the closure on ProcessorCount tasks while SaveObjects writes what was missing, in
//   batches of 500 on 4 tasks (the server's answers come from memory here); SaveObject(root)
//   last; then GetObject(root) and GetObject of every object from ProcessorCount x 2
//   threads, a null failing the receive;
// - a cached receive: GetObject(root) hits, so the SDK assumes everything exists, and
//   GetObject of every object from ProcessorCount x 2 threads;
// - a send (SerializeProcess, ObjectSaver): GetObject of every serialized object from
//   ProcessorCount x 2 threads (all miss: a new model) while one task writes SaveObjects
//   batches of 1,000, the root last;
// - GetAllObjects of the cache a send made;
// - opening and disposing a manager on that cache.
// The model is Speckle-shaped: generated objects (speckle_jsonl) as leaves, a parent for
// every ten that detaches them (written as the V2 serializer writes: an inline reference per
// child with "__closure":null, the parent's own closure last), and a root over the parents
// whose closure lists every object.
// objstash as a connector registers it: managers from ObjstashJsonCacheManagerFactory, which
// keeps one handle a file (its Dispose is timed in no operation: an application's
// singleton); and, to show what a handle costs, managers that open and close one each.
// Speckle's design as its SqLiteJsonCacheManager builds it: objects(hash TEXT PRIMARY KEY,
// content TEXT) WITHOUT ROWID, WAL, page_size 32768, mmap_size 30 GB, a pool of
// connections (one per concurrent caller), INSERT OR IGNORE in a transaction per
// SaveObjects; over Mono.Data.Sqlite (the system's SQLite).
//
//   dotnet/bench/run.sh sdk [--count 100000] [--rounds 3]

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Mono.Data.Sqlite;
using Objstash;

/// <summary>The members of Speckle's ISqLiteJsonCacheManager that its send and receive call.</summary>
interface IManager : IDisposable
{
    string GetObject(string id);
    bool HasObject(string id);
    void SaveObject(string id, string json);
    void SaveObjects(List<(string id, string json)> items);
    int CountAll();
}

/// <summary>Speckle's cache design: a pool of connections, one per concurrent caller.</summary>
sealed class SpecklePooled : IManager
{
    private readonly string _connection;
    private readonly ConcurrentBag<SqliteConnection> _idle = new ConcurrentBag<SqliteConnection>();
    private readonly ConcurrentBag<SqliteConnection> _all = new ConcurrentBag<SqliteConnection>();

    public SpecklePooled(string path)
    {
        // The journal mode in the connection string too: Mono.Data.Sqlite sets the one it is
        // given (Delete by default) at every Open, which needs the whole database locked.
        _connection = "Data Source=" + path + ";Journal Mode=Wal;Default Timeout=5";
        Use(c =>
        {
            Run(c, "PRAGMA page_size = 32768;");
            Run(c, "PRAGMA journal_mode = WAL;");
            Run(c, SpeckleDesign.Table);
            return 0;
        });
    }

    private static void Run(SqliteConnection c, string sql)
    {
        using (var command = c.CreateCommand()) { command.CommandText = sql; command.ExecuteNonQuery(); }
    }

    private T Use<T>(Func<SqliteConnection, T> f)
    {
        if (!_idle.TryTake(out SqliteConnection c))
        {
            c = new SqliteConnection(_connection);
            c.Open();
            Run(c, "PRAGMA busy_timeout = 5000;");
            Run(c, "PRAGMA mmap_size = 30000000000;");
            Run(c, "PRAGMA temp_store = MEMORY;");
            _all.Add(c);
        }
        try { return f(c); }
        finally { _idle.Add(c); }
    }

    private string Scalar(string sql, string id) => Use(c =>
    {
        using (var command = c.CreateCommand())
        {
            command.CommandText = sql;
            command.Parameters.AddWithValue("@hash", id);
            return command.ExecuteScalar() as string;
        }
    });

    public string GetObject(string id) => Scalar("SELECT content FROM objects WHERE hash = @hash LIMIT 1", id);

    public bool HasObject(string id) => Use(c =>
    {
        using (var command = c.CreateCommand())
        {
            command.CommandText = "SELECT 1 FROM objects WHERE hash = @hash LIMIT 1";
            command.Parameters.AddWithValue("@hash", id);
            return command.ExecuteScalar() != null;
        }
    });

    public void SaveObject(string id, string json) => SaveObjects(new List<(string id, string json)> { (id, json) });

    public void SaveObjects(List<(string id, string json)> items) => Use(c =>
    {
        SpeckleDesign.InsertOrIgnore(c, items);
        return 0;
    });

    public int CountAll() => Use(c =>
    {
        var all = new List<(string, string)>();
        using (var command = c.CreateCommand())
        {
            command.CommandText = "SELECT hash, content FROM objects";
            using (var reader = command.ExecuteReader())
                while (reader.Read()) all.Add((reader.GetString(0), reader.GetString(1)));
        }
        return all.Count;
    });

    public void Dispose()
    {
        foreach (var c in _all) c.Dispose();
    }
}

sealed class ObjstashManager : IManager
{
    /// <summary>The factory of the round under way (an application's singleton).</summary>
    public static ObjstashJsonCacheManagerFactory Factory;

    private readonly ObjstashJsonCacheManager _cache;

    /// <param name="shared">A manager from the factory (as the SDK asks for one), else one
    /// that opens and closes a handle of its own.</param>
    public ObjstashManager(string path, bool shared)
    {
        _cache = shared ? new ObjstashJsonCacheManager(Factory.StashAt(path)) : new ObjstashJsonCacheManager(path);
    }

    public string GetObject(string id) => _cache.GetObject(id);
    public bool HasObject(string id) => _cache.HasObject(id);
    public void SaveObject(string id, string json) => _cache.SaveObject(id, json);
    public void SaveObjects(List<(string id, string json)> items) => _cache.SaveObjects(items);
    public int CountAll() => _cache.GetAllObjects().Count;
    public void Dispose() => _cache.Dispose();
}

/// <summary>A Speckle-shaped model: leaves, parents of ten, a root over the parents.</summary>
sealed class Model
{
    public readonly List<(string id, string json)> Objects = new List<(string id, string json)>();
    public readonly Dictionary<string, string> ById = new Dictionary<string, string>();
    public string RootId, RootJson;

    static string Id(string body) => Stash.KeyOf(Encoding.UTF8.GetBytes(body)).Substring(0, 32);

    static string Reference(string id) =>
        "{\"speckle_type\":\"reference\",\"referencedId\":\"" + id + "\",\"__closure\":null}";

    public Model(List<(string id, string json)> leaves)
    {
        var parents = new List<string>();
        var closure = new StringBuilder();
        for (int start = 0; start < leaves.Count; start += 10)
        {
            var children = leaves.GetRange(start, Math.Min(10, leaves.Count - start));
            string body = "{\"speckle_type\":\"Objects.BuiltElements.Wall\",\"name\":\"wall " + start +
                "\",\"@displayValue\":[" + string.Join(",", children.Select(c => Reference(c.id))) + "]";
            string id = Id(body);
            string own = string.Join(",", children.Select(c => "\"" + c.id + "\":1"));
            Objects.AddRange(children);
            Objects.Add((id, body + ",\"id\":\"" + id + "\",\"__closure\":{" + own + "}}"));
            parents.Add(id);
            closure.Append("\"" + id + "\":1,");
            foreach (var c in children) closure.Append("\"" + c.id + "\":2,");
        }
        string root = "{\"speckle_type\":\"Speckle.Core.Models.Collection\",\"name\":\"model\",\"elements\":[" +
            string.Join(",", parents.Select(Reference)) + "]";
        RootId = Id(root);
        RootJson = root + ",\"id\":\"" + RootId + "\",\"__closure\":{" + closure.ToString().TrimEnd(',') + "}}";
        foreach (var o in Objects) ById[o.id] = o.json;
    }
}

/// <summary>A system under test: its name, and how a manager is opened at a path.</summary>
sealed class Contender
{
    public readonly string name;
    public readonly Func<string, IManager> open;

    public Contender(string name, Func<string, IManager> open)
    {
        this.name = name;
        this.open = open;
    }
}

static class SdkReplay
{
    static readonly int Cores = Environment.ProcessorCount;

    /// <summary>Runs <paramref name="work"/> over <paramref name="items"/> on
    /// <paramref name="threads"/> threads, each taking the next item.</summary>
    static void OnThreads<T>(IList<T> items, int threads, Action<T> work)
    {
        int next = -1;
        var workers = Enumerable.Range(0, threads).Select(_ => new Thread(() =>
        {
            for (int i = Interlocked.Increment(ref next); i < items.Count; i = Interlocked.Increment(ref next))
                work(items[i]);
        })).ToList();
        workers.ForEach(t => t.Start());
        workers.ForEach(t => t.Join());
    }

    static void ReadEvery(IManager m, Model model)
    {
        if (m.GetObject(model.RootId) == null) throw new Exception("the root is missing");
        OnThreads(model.Objects, Cores * 2, o =>
        {
            if (m.GetObject(o.id) == null) throw new Exception("Missing object id in SQLite cache: " + o.id);
        });
    }

    static void FreshReceive(Func<IManager> open, Model model)
    {
        using (var m = open())
        {
            if (m.GetObject(model.RootId) != null) throw new Exception("a fresh cache had the root");
            var missing = new BlockingCollection<string>(10000);
            var savers = Enumerable.Range(0, 4).Select(_ => Task.Run(() =>
            {
                var batch = new List<(string id, string json)>(500);
                foreach (var id in missing.GetConsumingEnumerable())
                {
                    batch.Add((id, model.ById[id]));
                    if (batch.Count == 500) { m.SaveObjects(batch); batch = new List<(string id, string json)>(500); }
                }
                if (batch.Count > 0) m.SaveObjects(batch);
            })).ToArray();
            OnThreads(model.Objects, Cores, o => { if (!m.HasObject(o.id)) missing.Add(o.id); });
            missing.CompleteAdding();
            Task.WaitAll(savers);
            m.SaveObject(model.RootId, model.RootJson);
            ReadEvery(m, model);
        }
    }

    static void CachedReceive(Func<IManager> open, Model model)
    {
        using (var m = open()) ReadEvery(m, model);
    }

    static void Send(Func<IManager> open, Model model)
    {
        using (var m = open())
        {
            var serialized = new BlockingCollection<(string id, string json)>(10000);
            var saver = Task.Run(() =>
            {
                var batch = new List<(string id, string json)>(1000);
                foreach (var o in serialized.GetConsumingEnumerable())
                {
                    batch.Add(o);
                    if (batch.Count == 1000) { m.SaveObjects(batch); batch = new List<(string id, string json)>(1000); }
                }
                if (batch.Count > 0) m.SaveObjects(batch);
            });
            OnThreads(model.Objects, Cores * 2, o => { if (m.GetObject(o.id) == null) serialized.Add(o); });
            serialized.Add((model.RootId, model.RootJson));
            serialized.CompleteAdding();
            saver.Wait();
        }
    }

    static double Seconds(Action a)
    {
        var w = Stopwatch.StartNew();
        a();
        return w.Elapsed.TotalSeconds;
    }

    static double Median(List<double> xs) => xs.OrderBy(x => x).ElementAt(xs.Count / 2);

    static int Main(string[] args)
    {
        string objects = null;
        int rounds = 3, opens = 50;
        for (int i = 0; i + 1 < args.Length; i += 2)
        {
            if (args[i] == "--objects") objects = args[i + 1];
            else if (args[i] == "--rounds") rounds = int.Parse(args[i + 1]);
        }
        if (objects == null) { Console.Error.WriteLine("--objects FILE (id<TAB>json lines) is required"); return 2; }
        var leaves = File.ReadLines(objects).Select(line =>
        {
            int tab = line.IndexOf('\t');
            return (id: line.Substring(0, tab), json: line.Substring(tab + 1));
        }).ToList();
        var model = new Model(leaves);
        Console.WriteLine($"A model of {model.Objects.Count + 1:N0} objects (root, {leaves.Count / 10:N0} parents, {leaves.Count:N0} leaves); {Cores} cores; a manager opened and disposed per operation; rounds alternate");
        var systems = new[]
        {
            new Contender("Speckle's cache design (Mono.Data.Sqlite)", p => new SpecklePooled(p + ".db")),
            new Contender("objstash (ObjstashJsonCacheManagerFactory)", p => new ObjstashManager(p + ".objstash", true)),
            new Contender("objstash, a handle per manager", p => new ObjstashManager(p + ".objstash", false)),
        };
        string[] ops = { "fresh receive", "cached receive", "send", "GetAllObjects", "open + dispose" };
        var results = systems.ToDictionary(s => s.name, s => ops.ToDictionary(o => o, o => new List<double>()));
        for (int round = 0; round < rounds; round++)
        {
            foreach (var system in round % 2 == 0 ? systems : systems.Reverse().ToArray())
            {
                string dir = Path.Combine(Path.GetTempPath(), "objstash-sdk-bench-" + Guid.NewGuid().ToString("N"));
                Directory.CreateDirectory(dir);
                string received = Path.Combine(dir, "received"), sent = Path.Combine(dir, "sent");
                ObjstashManager.Factory = new ObjstashJsonCacheManagerFactory(dir);
                Func<IManager> openReceived = () => system.open(received), openSent = () => system.open(sent);
                var r = results[system.name];
                r["fresh receive"].Add(Seconds(() => FreshReceive(openReceived, model)));
                r["cached receive"].Add(Seconds(() => CachedReceive(openReceived, model)));
                r["send"].Add(Seconds(() => Send(openSent, model)));
                int count = 0;
                r["GetAllObjects"].Add(Seconds(() => { using (var m = openSent()) count = m.CountAll(); }));
                if (count != model.Objects.Count + 1) throw new Exception(system.name + ": GetAllObjects counted " + count);
                var each = new List<double>();
                for (int i = 0; i < opens; i++) each.Add(Seconds(() => { using (var m = openSent()) { } }));
                r["open + dispose"].Add(Median(each));
                ObjstashManager.Factory.Dispose();
                Directory.Delete(dir, true);
                Console.Error.WriteLine($"round {round}: {system.name}: " + string.Join(", ", ops.Select(o => $"{o} {r[o].Last() * 1000:F1} ms")));
            }
        }
        string baseline = systems[0].name;
        Console.WriteLine($"\nmedians of {rounds} rounds, in ms; in brackets Speckle's time over objstash's (above 1: objstash is faster)");
        Console.WriteLine("| system | " + string.Join(" | ", ops) + " |");
        Console.WriteLine("|---|" + string.Concat(ops.Select(_ => "---:|")));
        foreach (var system in systems)
        {
            var cells = ops.Select(o =>
            {
                double v = Median(results[system.name][o]), b = Median(results[baseline][o]);
                string ms = (v * 1000).ToString(v < 0.01 ? "F2" : "F0");
                return system.name == baseline ? ms : $"{ms} ({b / v:F2}x)";
            });
            Console.WriteLine($"| {system.name} | " + string.Join(" | ", cells) + " |");
        }
        return 0;
    }
}
