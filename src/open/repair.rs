//! `repair`: check a closed stash and rebuild it only if something is wrong.
//!
//! The check is `verify`'s (`check.rs`) without a running stash: every row decoded and
//! hash-checked and found through the key index, the recorded totals and names against a
//! recount, and SQLite's integrity check.
//! A sound stash is left untouched; a damaged one is salvaged (`recovery.rs`), and the old
//! file is kept aside only when objects were or may have been lost.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::check::salvage;
use crate::check::{self, Check};
use crate::db::dicts;
use crate::db::meta;
use crate::db::schema::Schema;
use crate::error::{Error, Result};
use crate::files::lock::Hold;
use crate::open::header;
use crate::report::recovery::{RecoveryReport, Trigger};
use crate::settings::layout::Layout;
use crate::settings::values::Values;
use crate::values::value_log::ValueLog;

/// Checks the closed stash at `path` and, if anything is wrong with it, rebuilds it from
/// every object that still verifies: what to do when
/// [`Stash::verify`](crate::Stash::verify) reports problems. A sound stash is left as it
/// is. The report says what was found, what was kept and what was lost; the damaged file
/// is kept aside when anything was lost.
///
/// # Errors
/// [`Error::Locked`] if any handle has the stash open; [`Error::NotFound`] if there is no stash at
/// `path`; [`Error::ForeignDatabase`] or [`Error::NotADatabase`] for other files (a stash
/// whose header is damaged is repaired: its pages say it is one);
/// [`Error::Io`] or [`Error::Database`] if the new file cannot be written.
pub fn repair(path: impl AsRef<Path>) -> Result<RecoveryReport> {
    let path = path.as_ref();
    let span = tracing::debug_span!(
        "repair",
        path = %path.display(),
        kept = tracing::field::Empty,
        lost_anything = tracing::field::Empty,
    );
    let _entered = span.enter();
    let report = repair_in(path)?;
    span.record("kept", report.recovered);
    span.record("lost_anything", report.lost_anything());
    Ok(report)
}

fn repair_in(path: &Path) -> Result<RecoveryReport> {
    // A stash whose header is gone is rebuilt from its pages (salvage reads them through a
    // copy with a mended header); SQLite cannot open it to check it.
    let headless = match header::recognise(path) {
        Ok(Some(_)) => None,
        Ok(None) => return Err(Error::NotFound { path: path.to_path_buf() }),
        Err(Error::DamagedHeader { reason, .. }) => Some(reason),
        Err(e) => return Err(e),
    };
    // Rebuilding replaces the file: nobody else may have it open.
    let hold = Hold::acquire(path, Duration::from_secs(10))?;
    if !hold.alone() {
        return Err(Error::Locked { path: path.to_path_buf() });
    }
    if let Some(problem) = headless {
        return salvage::salvage(path, None, Trigger::Repair, problem);
    }
    let problem = {
        // Opened for writing though it only reads: a WAL database's last connection folds
        // the log back and removes it on closing, which a read-only one cannot do.
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| Error::db(format!("opening {} to check it", path.display()), e))?;
        match find_problem(&conn) {
            Ok(objects) => return Ok(RecoveryReport::sound(Trigger::Repair, objects)),
            Err(problem) => {
                // Committed pages still in the write-ahead log go into the file, which the
                // salvage's page reader reads directly (on a damaged file this may fail).
                let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                problem
            }
        }
    };
    salvage::salvage(path, None, Trigger::Repair, problem)
}

/// The object count of a sound stash, or what is wrong with it: the check `verify` runs
/// (`check.rs`), on the one connection of a closed file.
fn find_problem(conn: &Connection) -> Result<u64, String> {
    let layout = meta::read_layout(conn)
        .map_err(|e| format!("its layout cannot be read: {e}"))?
        .unwrap_or(Layout::Single);
    let dicts = dicts::load(conn).map_err(|e| format!("its dictionaries: {e}"))?;
    let schema =
        Schema::read(conn, layout).map_err(|e| format!("its tables cannot be read: {e}"))?;
    let log = match schema.stored() {
        Values::InFile => Some(
            ValueLog::open(conn.path().map_or(Path::new(""), Path::new), false)
                .map_err(|e| e.to_string())?,
        ),
        Values::InRows => None,
    };
    let check = Check {
        connect: || Ok(conn),
        schema: &schema,
        dicts: &dicts,
        log: log.as_ref(),
        pool: None,
    };
    let report = check.run();
    if report.is_ok() { Ok(report.checked) } else { Err(check::summary(&report)) }
}
