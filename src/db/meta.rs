//! The meta table: what a stash records by name (its layout, durability, codec, size cap,
//! whether the last writer closed cleanly, the boot it ran in) and its running totals
//! (objects, raw and stored bytes, names, pins, evictions), which the writer updates in the
//! same transaction as the rows they count, so the size report costs one read instead of a
//! scan. Older versions read the table by name, so a name they do not know is no format
//! change.

use rusqlite::{Connection, OptionalExtension, params};

use crate::codec::gzip_code::GzipCode;
use crate::error::{DbContext, Result};
use crate::settings::layout::Layout;

/// The meta table: settings and running totals by name.
pub(crate) const META: &str = "objstash_meta";

/// What the meta table says about the last session that wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// The last writer closed cleanly.
    Clean,
    /// A writer in fast mode did not close: the file may be damaged.
    OpenFast,
    /// A writer in safe mode did not close: SQLite's WAL recovery makes that harmless.
    OpenSafe,
    /// The owner of an owned stash did not close: a commit may be half-written.
    OpenOwned,
    /// A writer met damage it could not write past (`writer/run.rs`): the next open alone
    /// checks the file and rebuilds it from what verifies, whatever the boot.
    Damaged,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Clean => "clean",
            State::OpenFast => "open-fast",
            State::OpenSafe => "open-safe",
            State::OpenOwned => "open-owned",
            State::Damaged => "damaged",
        }
    }
}

/// Declares the running totals once: [`Totals`] (as stored) and [`Delta`] (a change to
/// them) with the same fields, each kept in the meta table under its own name.
macro_rules! running_totals {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// Object count and byte totals, as kept in the meta table.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(crate) struct Totals {
            $($(#[$doc])* pub $field: u64,)*
        }

        /// Signed changes to the running totals.
        #[derive(Clone, Copy, Debug, Default)]
        pub(crate) struct Delta {
            $(pub $field: i64,)*
        }

        impl Totals {
            /// Each total with the meta table's name for it.
            pub(crate) fn entries(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }

            /// Reads each total with `read`, given its meta name.
            fn read(mut read: impl FnMut(&'static str) -> Result<u64>) -> Result<Totals> {
                Ok(Totals { $($field: read(stringify!($field))?,)* })
            }
        }

        impl Delta {
            /// Each change with the meta table's name for its total.
            fn entries(&self) -> Vec<(&'static str, i64)> {
                vec![$((stringify!($field), self.$field)),*]
            }
        }
    };
}

running_totals! {
    objects,
    raw_bytes,
    stored_bytes,
    /// Names (see `names.rs`); 0 for a stash without a names table.
    names,
    /// Pinned objects and their stored bytes (`uses.rs`).
    pinned,
    pinned_bytes,
    /// Objects evicted since the stash was made, and their stored bytes (`evict.rs`):
    /// history, which a recount keeps as recorded.
    evicted,
    evicted_bytes,
    /// Chunks of large objects and their stored bytes (`chunks.rs`); the chunks' bytes are
    /// not in `stored_bytes`, which counts the object rows (a chunked object's row is its
    /// manifest).
    chunks,
    chunk_bytes,
}

/// Reads the layout recorded in a stash; `None` when the value is missing or unknown.
pub(crate) fn read_layout(conn: &Connection) -> Result<Option<Layout>> {
    read_setting(conn, "layout")
}

/// Reads a setting recorded in the meta table (`layout`, `durability`, `codec`); `None`
/// when it is missing (a stash made before it was recorded) or a word this version does
/// not know.
pub(crate) fn read_setting<T: std::str::FromStr>(
    conn: &Connection,
    name: &str,
) -> Result<Option<T>> {
    let word: Option<String> = read_meta(conn, name)?;
    Ok(word.and_then(|w| w.parse().ok()))
}

/// The boot the stash was last opened in (see `open/sequence.rs`); `None` if not recorded.
pub(crate) fn read_boot(conn: &Connection) -> Result<Option<String>> {
    Ok(read_meta::<String>(conn, "boot")?.filter(|boot| !boot.is_empty()))
}

/// Records a setting in the meta table. Older versions read the meta table by name, so a
/// setting they do not know is no format change.
pub(crate) fn write_setting(conn: &Connection, name: &str, value: &str) -> Result<()> {
    conn.execute(
        &format!("INSERT OR REPLACE INTO {META}(name, value) VALUES (?1, ?2)"),
        [name, value],
    )
    .context(|| format!("recording the stash's {name}"))?;
    Ok(())
}

pub(crate) fn read_state(conn: &Connection) -> Result<State> {
    let word: Option<String> = read_meta(conn, "state")?;
    Ok(match word.as_deref() {
        Some("open-fast") => State::OpenFast,
        Some("open-safe") => State::OpenSafe,
        Some("open-owned") => State::OpenOwned,
        Some("damaged") => State::Damaged,
        _ => State::Clean,
    })
}

pub(crate) fn write_state(conn: &Connection, state: State) -> Result<()> {
    conn.execute(&format!("UPDATE {META} SET value = ?1 WHERE name = 'state'"), [state.as_str()])
        .context(|| "recording the stash's state".to_string())?;
    Ok(())
}

pub(crate) fn read_totals(conn: &Connection) -> Result<Totals> {
    Totals::read(|name| read_count(conn, name))
}

/// The size cap recorded in the stash (`max_size`), if it has one.
pub(crate) fn read_max_size(conn: &Connection) -> Result<Option<u64>> {
    Ok(Some(read_count(conn, "max_size")?).filter(|&cap| cap > 0))
}

/// Records the size cap (`None` removes it), inside the caller's transaction if any.
pub(crate) fn write_max_size(conn: &Connection, cap: Option<u64>) -> Result<()> {
    conn.execute(
        &format!("INSERT OR REPLACE INTO {META}(name, value) VALUES ('max_size', ?1)"),
        [cap.map_or(0, |c| c.min(i64::MAX as u64) as i64)],
    )
    .context(|| "recording the stash's size cap".to_string())?;
    Ok(())
}

/// A count recorded in the meta table; 0 when it is not recorded.
pub(crate) fn read_count(conn: &Connection, name: &str) -> Result<u64> {
    Ok(read_meta::<i64>(conn, name)?.unwrap_or(0).max(0) as u64)
}

/// Adds signed deltas to the running totals, inside the caller's transaction; a total not
/// recorded yet starts at 0.
pub(crate) fn add_totals(conn: &Connection, delta: &Delta) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "INSERT INTO {META}(name, value) VALUES (?1, ?2) \
             ON CONFLICT(name) DO UPDATE SET value = value + ?2"
        ))
        .context(|| "preparing the totals update".to_string())?;
    for (name, delta) in delta.entries() {
        if delta != 0 {
            stmt.execute(params![name, delta]).context(|| format!("updating the {name} total"))?;
        }
    }
    Ok(())
}

/// Adds one to the count `name`, inside the caller's transaction; its new value.
pub(crate) fn count_one(conn: &Connection, name: &str) -> Result<u64> {
    conn.prepare_cached(&format!(
        "INSERT INTO {META}(name, value) VALUES (?1, 1) \
         ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value"
    ))
    .and_then(|mut stmt| stmt.query_row([name], |r| r.get::<_, i64>(0)))
    .map(|n| n.max(0) as u64)
    .context(|| format!("counting {name}"))
}

fn read_meta<T: rusqlite::types::FromSql>(conn: &Connection, name: &str) -> Result<Option<T>> {
    conn.prepare_cached(&format!("SELECT value FROM {META} WHERE name = ?1"))
        .and_then(|mut stmt| stmt.query_row([name], |r| r.get(0)).optional())
        .context(|| format!("reading {name} from the stash's meta table"))
}
/// The meta table's name for the stash's gzip code (`codec/gzip_code.rs`), stored as its
/// code lengths, a hexadecimal digit each.
const GZIP_CODE: &str = "gzip_code";

/// The code stored in `conn`'s stash, if one is. A stored value this version cannot read
/// is no code (rows stay readable: every member carries its own code).
pub(crate) fn read_gzip_code(conn: &Connection) -> Result<Option<GzipCode>> {
    let value: Option<String> = conn
        .query_row(&format!("SELECT value FROM {META} WHERE name = ?1"), [GZIP_CODE], |r| r.get(0))
        .optional()
        .context(|| "reading the stash's gzip code".to_string())?;
    let Some(value) = value else { return Ok(None) };
    let lengths: Option<Vec<u8>> = value.chars().map(|c| c.to_digit(16).map(|d| d as u8)).collect();
    match lengths.map(GzipCode::from_lengths) {
        Some(Ok(code)) => Ok(Some(code)),
        Some(Err(why)) => {
            log::warn!("objstash: the stash's gzip code is unusable ({why}); not used");
            Ok(None)
        }
        None => {
            log::warn!("objstash: the stash's gzip code is not hexadecimal; not used");
            Ok(None)
        }
    }
}

/// Stores `code` as the stash's, unless it has one already: the first stored stays.
pub(crate) fn write_gzip_code(conn: &Connection, code: &GzipCode) -> Result<()> {
    let hex: String = code
        .lengths()
        .iter()
        .map(|l| char::from_digit((*l).into(), 16).expect("at most 15"))
        .collect();
    conn.execute(
        &format!("INSERT OR IGNORE INTO {META}(name, value) VALUES (?1, ?2)"),
        [GZIP_CODE, hex.as_str()],
    )
    .context(|| "storing the stash's gzip code".to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_codes_are_checked_and_the_first_stays() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("CREATE TABLE {META}(name TEXT PRIMARY KEY, value)")).unwrap();
        assert_eq!(read_gzip_code(&conn).unwrap(), None);
        let first = GzipCode::train(&speckle_gen::objects(7, 0, 100)).unwrap();
        let second = GzipCode::train(&[b"{}".repeat(50)]).unwrap();
        write_gzip_code(&conn, &first).unwrap();
        write_gzip_code(&conn, &second).unwrap();
        assert_eq!(read_gzip_code(&conn).unwrap().as_ref(), Some(&first));
        for bad in ["xyz", "", &"f".repeat(316), &"1".repeat(316)] {
            conn.execute(&format!("UPDATE {META} SET value = ?1"), [bad]).unwrap();
            assert_eq!(read_gzip_code(&conn).unwrap(), None, "{bad:.10}");
        }
    }
}
