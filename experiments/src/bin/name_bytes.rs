//! What a name costs on disk (#27's aim: at most 64 bytes for a name of 32 characters),
//! and the designs that could get there: SQLite alone, 8 KiB pages, names of 32 lowercase
//! hex characters (Speckle's ids) in random order, each naming the object saved with it
//! (rowids rise with the names, as in a save), in batches of 50,000 per transaction.
//!
//! `cargo run --release -p objstash-experiments --bin name_bytes -- [NAMES]` (default
//! 1,000,000). Prints bytes per name of the names' tables and indexes (`dbstat`-free:
//! pages in use after each design's inserts, less the empty file's).
//!
//! Designs, each a names table `WITHOUT ROWID` keyed by the name:
//! - `today`: `(name, key)` and an index on `key`, so that removing an object drops its
//!   names (objstash's format 3).
//! - `no reverse`: `(name, key)` alone; the reverse index would be built at the first
//!   removal or eviction, as the use index is.
//! - `packed`: a name of lowercase hex digits stored as the bytes they spell (16 for 32).
//! - `row ref`: the object's row (table and rowid) instead of its 32-byte key; a name is
//!   dropped with its object, so a row it names is never another object's.
//! - combinations of the three.

use std::time::Instant;

use anyhow::Result;
use rusqlite::{Connection, params};

const BATCH: u64 = 50_000;

struct Design {
    name: &'static str,
    packed: bool,
    row_ref: bool,
    reverse: bool,
}

const DESIGNS: [Design; 8] = [
    Design { name: "today", packed: false, row_ref: false, reverse: true },
    Design { name: "no reverse", packed: false, row_ref: false, reverse: false },
    Design { name: "packed", packed: true, row_ref: false, reverse: true },
    Design { name: "packed, no reverse", packed: true, row_ref: false, reverse: false },
    Design { name: "row ref", packed: false, row_ref: true, reverse: true },
    Design { name: "row ref, no reverse", packed: false, row_ref: true, reverse: false },
    Design { name: "packed, row ref", packed: true, row_ref: true, reverse: true },
    Design { name: "packed, row ref, no reverse", packed: true, row_ref: true, reverse: false },
];

fn main() -> Result<()> {
    let names: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1_000_000);
    println!("{names} names of 32 hex characters, 8 KiB pages");
    println!("{:<30} {:>12} {:>10}", "design", "bytes/name", "names/s");
    for design in &DESIGNS {
        let dir = tempfile::tempdir()?;
        let conn = Connection::open(dir.path().join("names.db"))?;
        conn.execute_batch(
            "PRAGMA page_size = 8192; PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF;
             PRAGMA cache_size = -16384;",
        )?;
        let reference = if design.row_ref { "ref INTEGER NOT NULL" } else { "ref BLOB NOT NULL" };
        conn.execute_batch(&format!(
            "CREATE TABLE names(name BLOB PRIMARY KEY, {reference}) WITHOUT ROWID;"
        ))?;
        if design.reverse {
            conn.execute_batch("CREATE INDEX names_ref ON names(ref);")?;
        }
        let empty = in_use(&conn)?;
        let start = Instant::now();
        let mut i = 0;
        while i < names {
            let tx = conn.unchecked_transaction()?;
            {
                let mut insert = tx.prepare("INSERT INTO names(name, ref) VALUES (?1, ?2)")?;
                for n in i..(i + BATCH).min(names) {
                    let id = blake3::hash(&n.to_le_bytes());
                    let hex = id.to_hex();
                    let name: Vec<u8> = if design.packed {
                        // A tag byte keeps packed names apart from names stored as written.
                        std::iter::once(1).chain(id.as_bytes()[..16].iter().copied()).collect()
                    } else {
                        hex.as_bytes()[..32].to_vec()
                    };
                    if design.row_ref {
                        // The object's rowid and its table (a bucketed stash has 256).
                        let row = (n as i64 + 1) << 8 | i64::from(id.as_bytes()[31]);
                        insert.execute(params![name, row])?;
                    } else {
                        let key = blake3::hash(hex.as_bytes());
                        insert.execute(params![name, &key.as_bytes()[..]])?;
                    }
                }
            }
            tx.commit()?;
            i += BATCH;
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = in_use(&conn)? - empty;
        println!(
            "{:<30} {:>12.1} {:>10.0}",
            design.name,
            bytes as f64 / names as f64,
            names as f64 / secs
        );
    }
    Ok(())
}

/// Bytes of the pages in use (the file's pages less the free ones).
fn in_use(conn: &Connection) -> Result<u64> {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let free: i64 = conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    Ok((pages - free) as u64 * 8192)
}
