//! The running totals recounted from the rows themselves: what `verify` compares the
//! recorded totals with, and what a rebuilt or uncleanly closed stash records anew.

use rusqlite::{Connection, params};

use crate::db::meta::{self, META, Totals};
use crate::db::names;
use crate::db::schema::{self, Schema};
use crate::error::{DbContext, Result};
use crate::large::chunks;

/// Recounts the totals from the rows themselves and stores them.
pub(crate) fn recount_totals(conn: &Connection, schema: &Schema) -> Result<Totals> {
    let totals = count_totals(conn, schema)?;
    let sql = format!("INSERT OR REPLACE INTO {META}(name, value) VALUES (?1, ?2)");
    for (name, value) in totals.entries() {
        conn.execute(&sql, params![name, value as i64])
            .context(|| format!("storing the recounted {name} total"))?;
    }
    Ok(totals)
}

/// Counts the totals from the rows themselves (the evicted counts, which are history, as
/// recorded).
pub(crate) fn count_totals(conn: &Connection, schema: &Schema) -> Result<Totals> {
    let mut totals = Totals::default();
    for table in &schema.tables {
        let (n, raw, stored): (i64, i64, i64) = conn
            .query_row(&table.totals, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .context(|| format!("counting the rows of table {}", table.name))?;
        totals.objects += n as u64;
        totals.raw_bytes += raw as u64;
        totals.stored_bytes += stored as u64;
    }
    totals.names = names::count(conn)?;
    if schema::has_uses(conn, schema)? {
        for table in &schema.tables {
            let (n, bytes): (i64, i64) = conn
                .query_row(&table.pinned_totals, [], |r| Ok((r.get(0)?, r.get(1)?)))
                .context(|| format!("counting the pinned rows of table {}", table.name))?;
            totals.pinned += n as u64;
            totals.pinned_bytes += bytes as u64;
        }
    }
    let chunks = chunks::counts(conn)?;
    totals.chunks = chunks.chunks;
    totals.chunk_bytes = chunks.stored_bytes;
    let recorded = meta::read_totals(conn)?;
    totals.evicted = recorded.evicted;
    totals.evicted_bytes = recorded.evicted_bytes;
    Ok(totals)
}
