//! The stash's counters of calls (hits, misses, saves; `cache/counts.rs`) in the meta table,
//! each under `count_` and its name, with `count_since`, when counting began (milliseconds
//! since the Unix epoch).
//!
//! Evictions are counted already, since the stash was made (`evicted`, `evicted_bytes`):
//! those since counting began are those totals less what they were then, kept under
//! `count_base_evicted` and `count_base_evicted_bytes`, so an eviction writes nothing more.
//! Older versions read the meta table by name, so these are no format change.

use rusqlite::{Connection, params};

use crate::db::meta::{self, META};
use crate::error::{DbContext, Result};

const SINCE: &str = "count_since";
/// The eviction totals counted from, and the meta names of the totals.
const BASES: [(&str, &str); 2] =
    [("count_base_evicted", "evicted"), ("count_base_evicted_bytes", "evicted_bytes")];

/// The stash's counters as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// When counting began; `None` if it never has.
    pub since: Option<i64>,
    /// Each count asked for, in the order asked.
    pub counts: Vec<u64>,
    /// Objects evicted since counting began, and their stored bytes.
    pub evicted: u64,
    pub evicted_bytes: u64,
}

/// Adds `counts` (name and signed amount) to the stash's counters, inside the caller's transaction.
/// A stash that never counted starts counting at `began` (milliseconds), its evictions from
/// the totals as the transaction has them.
pub(crate) fn add(conn: &Connection, counts: &[(&str, i64)], began: i64) -> Result<()> {
    let started = conn
        .prepare_cached(&format!("INSERT OR IGNORE INTO {META}(name, value) VALUES (?1, ?2)"))
        .and_then(|mut stmt| stmt.execute(params![SINCE, began]))
        .context(|| "recording when counting began".to_string())?;
    if started == 1 {
        set_bases(conn)?;
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "INSERT INTO {META}(name, value) VALUES (?1, ?2) \
             ON CONFLICT(name) DO UPDATE SET value = value + ?2"
        ))
        .context(|| "preparing the counters' update".to_string())?;
    for &(name, n) in counts {
        if n != 0 {
            stmt.execute(params![format!("count_{name}"), n])
                .context(|| format!("counting {name}"))?;
        }
    }
    Ok(())
}

/// Sets every counter named in `names` to 0 and counting to begin at `now`, inside the
/// caller's transaction.
pub(crate) fn reset(conn: &Connection, names: &[&str], now: i64) -> Result<()> {
    for name in names {
        meta::write_setting(conn, &format!("count_{name}"), "0")?;
    }
    conn.execute(
        &format!("INSERT OR REPLACE INTO {META}(name, value) VALUES (?1, ?2)"),
        params![SINCE, now],
    )
    .context(|| "resetting the counters".to_string())?;
    set_bases(conn)
}

/// Counts evictions from the totals as they are now.
fn set_bases(conn: &Connection) -> Result<()> {
    for (base, total) in BASES {
        let value = meta::read_count(conn, total)?;
        conn.execute(
            &format!("INSERT OR REPLACE INTO {META}(name, value) VALUES (?1, ?2)"),
            params![base, value.min(i64::MAX as u64) as i64],
        )
        .context(|| "recording where eviction counts begin".to_string())?;
    }
    Ok(())
}

/// The counters named in `names`, as the stash records them.
pub(crate) fn read(conn: &Connection, names: &[&str]) -> Result<Recorded> {
    let since = meta::read_count(conn, SINCE)?;
    if since == 0 {
        return Ok(Recorded { counts: vec![0; names.len()], ..Recorded::default() });
    }
    let counts: Result<Vec<u64>> =
        names.iter().map(|name| meta::read_count(conn, &format!("count_{name}"))).collect();
    let evicted = |(base, total): (&str, &str)| -> Result<u64> {
        Ok(meta::read_count(conn, total)?.saturating_sub(meta::read_count(conn, base)?))
    };
    Ok(Recorded {
        since: Some(since as i64),
        counts: counts?,
        evicted: evicted(BASES[0])?,
        evicted_bytes: evicted(BASES[1])?,
    })
}
