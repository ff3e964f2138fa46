// objstash through the .NET binding against Speckle's own SQLite cache design, side by side
// in one run, the two alternating round by round. Speckle's design as speckle-sharp-sdk's
// SqLiteJsonCacheManager builds it: `objects(hash TEXT PRIMARY KEY, content TEXT) WITHOUT
// ROWID`, WAL, page_size 32768, mmap_size 30 GB, busy_timeout 5000, a transaction of
// INSERT OR IGNORE per SaveObjects call, a SELECT per GetObject and HasObject; here over
// Mono.Data.Sqlite (the system's SQLite). objstash: ObjstashJsonCacheManager (zstd-dict).
//
//   dotnet/bench/run.sh [--count 100000] [--rounds 3] [--reads 20000]
//
// Prints a markdown table of medians and ratios, and what a P/Invoke call costs.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using Mono.Data.Sqlite;
using Objstash;

interface ICache : IDisposable
{
    void SaveObjects(List<(string id, string json)> items);
    string GetObject(string id);
    bool HasObject(string id);
}

sealed class SpeckleSqlite : ICache
{
    private readonly SqliteConnection _db;

    public SpeckleSqlite(string path)
    {
        _db = new SqliteConnection("Data Source=" + path);
        _db.Open();
        Run("PRAGMA page_size = 32768;");
        Run("PRAGMA journal_mode = WAL;");
        Run("PRAGMA mmap_size = 30000000000;");
        Run("PRAGMA busy_timeout = 5000;");
        Run(SpeckleDesign.Table);
    }

    private void Run(string sql)
    {
        using (var c = _db.CreateCommand()) { c.CommandText = sql; c.ExecuteNonQuery(); }
    }

    public void SaveObjects(List<(string id, string json)> items) => SpeckleDesign.InsertOrIgnore(_db, items);

    public string GetObject(string id)
    {
        using (var c = _db.CreateCommand())
        {
            c.CommandText = "SELECT content FROM objects WHERE hash = @hash LIMIT 1";
            c.Parameters.AddWithValue("@hash", id);
            return c.ExecuteScalar() as string;
        }
    }

    public bool HasObject(string id)
    {
        using (var c = _db.CreateCommand())
        {
            c.CommandText = "SELECT 1 FROM objects WHERE hash = @hash LIMIT 1";
            c.Parameters.AddWithValue("@hash", id);
            return c.ExecuteScalar() != null;
        }
    }

    public void Dispose() => _db.Dispose();
}

sealed class ObjstashCache : ICache
{
    private readonly ObjstashJsonCacheManager _cache;

    public ObjstashCache(string path, StashOptions options = null) { _cache = new ObjstashJsonCacheManager(path, options); }

    public void SaveObjects(List<(string id, string json)> items) => _cache.SaveObjects(items);

    public string GetObject(string id) => _cache.GetObject(id);

    public bool HasObject(string id) => _cache.HasObject(id);

    public void Dispose() => _cache.Dispose();
}

sealed class Kind
{
    public readonly string name;
    public readonly Func<string, ICache> open;

    public Kind(string name, Func<string, ICache> open)
    {
        this.name = name;
        this.open = open;
    }
}

static class Bench
{
    static double Median(List<double> xs)
    {
        var s = xs.OrderBy(x => x).ToList();
        return s[s.Count / 2];
    }

    static long DirBytes(string dir) =>
        Directory.GetFiles(dir).Sum(f => new FileInfo(f).Length);

    static int Main(string[] args)
    {
        string objects = null;
        int rounds = 3, reads = 20000, batch = 10000;
        for (int i = 0; i + 1 < args.Length; i += 2)
        {
            if (args[i] == "--objects") objects = args[i + 1];
            else if (args[i] == "--rounds") rounds = int.Parse(args[i + 1]);
            else if (args[i] == "--reads") reads = int.Parse(args[i + 1]);
        }
        if (objects == null) { Console.Error.WriteLine("--objects FILE (id<TAB>json lines) is required"); return 2; }
        var items = new List<(string id, string json)>();
        foreach (var line in File.ReadLines(objects))
        {
            int tab = line.IndexOf('\t');
            items.Add((line.Substring(0, tab), line.Substring(tab + 1)));
        }
        var rng = new Random(7);
        var picks = Enumerable.Range(0, reads).Select(_ => items[rng.Next(items.Count)].id).ToList();
        long raw = items.Sum(x => (long)System.Text.Encoding.UTF8.GetByteCount(x.json));
        Console.WriteLine($"{items.Count} generated Speckle objects, {raw / 1e6:F1} MB of JSON; {reads} random reads; rounds alternate");

        var kinds = new[]
        {
            new Kind("Speckle's SQLite cache design (Mono.Data.Sqlite)", d => new SpeckleSqlite(Path.Combine(d, "objects.db"))),
            new Kind("objstash (ObjstashJsonCacheManager)", d => new ObjstashCache(Path.Combine(d, "objects.objstash"))),
            // Values in a file of their own: the database (keys, names, places) is mapped
            // whole, so a read's descents touch memory and its one copy is the value's.
            new Kind("objstash, values in a file", d => new ObjstashCache(Path.Combine(d, "objects.objstash"),
                new StashOptions { Codec = "zstd-dict", Values = "file", ReadMapBytes = 2UL << 30 })),
        };
        var results = kinds.ToDictionary(k => k.name, k => new Dictionary<string, List<double>>());
        Action<string, string, double> Note = (kind, what, value) =>
        {
            List<double> list;
            if (!results[kind].TryGetValue(what, out list)) results[kind][what] = list = new List<double>();
            list.Add(value);
        };
        for (int round = 0; round < rounds; round++)
        {
            var order = round % 2 == 0 ? kinds : kinds.Reverse().ToArray();
            foreach (var kind in order)
            {
                string dir = Path.Combine(Path.GetTempPath(), "objstash-bench-" + Guid.NewGuid().ToString("N"));
                Directory.CreateDirectory(dir);
                var cache = kind.open(dir);
                var watch = Stopwatch.StartNew();
                for (int start = 0; start < items.Count; start += batch)
                    cache.SaveObjects(items.GetRange(start, Math.Min(batch, items.Count - start)));
                Note(kind.name, "save", items.Count / watch.Elapsed.TotalSeconds);
                cache.Dispose();
                // What the save left dirty goes to disk before the reads, for each system:
                // reads are timed in a steady state, not beside the kernel's writeback.
                using (var sync = Process.Start("sync")) sync.WaitForExit();
                cache = kind.open(dir);
                foreach (var id in picks.Take(1000)) cache.GetObject(id); // warm-up
                watch.Restart();
                foreach (var id in picks)
                    if (cache.GetObject(id) == null) throw new Exception(kind.name + " lost " + id);
                Note(kind.name, "get", picks.Count / watch.Elapsed.TotalSeconds);
                watch.Restart();
                foreach (var id in picks)
                    if (!cache.HasObject(id)) throw new Exception(kind.name + " lost " + id);
                Note(kind.name, "has", picks.Count / watch.Elapsed.TotalSeconds);
                cache.Dispose();
                Note(kind.name, "bytes", DirBytes(dir));
                Directory.Delete(dir, true);
                Console.Error.WriteLine($"round {round}: {kind.name}: save {results[kind.name]["save"].Last():F0}/s, GetObject {results[kind.name]["get"].Last():F0}/s");
            }
        }
        string baseName = kinds[0].name;
        Console.WriteLine($"\nmedians of {rounds} rounds; ratios against {baseName}");
        Console.WriteLine("| system | SaveObjects objects/s | GetObject objects/s | HasObject ids/s | bytes on disk |");
        Console.WriteLine("|---|---:|---:|---:|---:|");
        foreach (var kind in kinds)
        {
            Func<string, Func<double, string>, string> Cell = (what, show) =>
            {
                double v = Median(results[kind.name][what]), b = Median(results[baseName][what]);
                return kind.name == baseName ? show(v) : $"{show(v)} ({v / b:F2}x)";
            };
            Console.WriteLine($"| {kind.name} | {Cell("save", v => v.ToString("N0"))} | {Cell("get", v => v.ToString("N0"))} | {Cell("has", v => v.ToString("N0"))} | {Cell("bytes", v => (v / 1e6).ToString("F1") + " MB")} |");
        }

        // What crossing the boundary costs: a native call that does nothing but return, and
        // the same objects read one call each against one call for them all.
        const int calls = 1000000;
        var w = Stopwatch.StartNew();
        for (int i = 0; i < calls; i++) Stash.KeyOf(new byte[0]);
        double perCall = w.Elapsed.TotalMilliseconds * 1e6 / calls;
        string d2 = Path.Combine(Path.GetTempPath(), "objstash-bench-" + Guid.NewGuid().ToString("N"));
        Directory.CreateDirectory(d2);
        using (var stash = Stash.Open(Path.Combine(d2, "calls.objstash")))
        {
            var keys = stash.SaveNamed(items.Take(20000).Select(x => x.id).ToList(),
                items.Take(20000).Select(x => System.Text.Encoding.UTF8.GetBytes(x.json)).ToList());
            stash.Flush();
            w.Restart();
            foreach (var k in keys) stash.Get(k);
            double loop = keys.Length / w.Elapsed.TotalSeconds;
            w.Restart();
            stash.GetMany(keys);
            double many = keys.Length / w.Elapsed.TotalSeconds;
            Console.WriteLine($"\nA P/Invoke call with its marshalling (KeyOf of 0 bytes): {perCall:F0} ns. Reading 20,000 objects: a Get per object {loop:N0}/s, one GetMany {many:N0}/s ({many / loop:F2}x).");
        }
        Directory.Delete(d2, true);
        return 0;
    }
}
