// What both benchmarks run of Speckle's SQLite cache design (speckle-sharp-sdk's
// SqLiteJsonCacheManager): its table, and its save, a transaction of INSERT OR IGNORE.

using System.Collections.Generic;
using Mono.Data.Sqlite;

static class SpeckleDesign
{
    public const string Table = "CREATE TABLE IF NOT EXISTS objects(hash TEXT PRIMARY KEY, content TEXT) WITHOUT ROWID;";

    /// <summary>Saves <paramref name="items"/> in one transaction; an id saved already keeps
    /// its first object.</summary>
    public static void InsertOrIgnore(SqliteConnection db, List<(string id, string json)> items)
    {
        using (var tx = db.BeginTransaction())
        using (var c = db.CreateCommand())
        {
            c.Transaction = tx;
            c.CommandText = "INSERT OR IGNORE INTO objects(hash, content) VALUES(@hash, @content)";
            var hash = c.Parameters.Add("@hash", System.Data.DbType.String);
            var content = c.Parameters.Add("@content", System.Data.DbType.String);
            foreach (var item in items)
            {
                hash.Value = item.id;
                content.Value = item.json;
                c.ExecuteNonQuery();
            }
            tx.Commit();
        }
    }
}
