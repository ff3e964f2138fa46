//! What a check after an unclean shutdown or a repair found, and what rebuilding kept and
//! lost ([`RecoveryReport`]); SQLite's integrity check. Rebuilding is `salvage.rs`.
//!
//! A fast-mode stash is not synced, so a stop of the machine (not of a process: WAL
//! survives that) can leave the file damaged; an open after one runs the integrity check,
//! and a damaged file is salvaged. The report says what was kept and what was lost, and
//! whether the loss is known.

use std::path::PathBuf;

use rusqlite::Connection;

/// Why a stash was checked and, if need be, rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// An open found that the previous fast-mode session did not close.
    UncleanShutdown,
    /// [`repair`](crate::repair) was called.
    Repair,
    /// An open found the file damaged (its header, schema or meta table) without an
    /// unclean shutdown to explain it.
    DamageFound,
}

/// What a check of a stash found, and what rebuilding it kept and lost: after an open
/// found the previous fast-mode session did not close, or after [`repair`](crate::repair).
///
/// Writes that session had not committed are gone whatever the report says; `flush`
/// acknowledgements are what [`Durability::Safe`](crate::Durability::Safe) makes durable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Why the stash was checked.
    pub trigger: Trigger,
    /// What the check found wrong with the file; `None` when it checked sound and was kept
    /// as it was.
    pub problem: Option<String>,
    /// Objects in the stash after the check: all of them when it was sound, else those that
    /// verified and were carried into the new file.
    pub recovered: u64,
    /// Rows that were read but failed to decompress or to match their key; they are gone.
    /// A row whose key bytes are damaged can be read twice under different keys (once
    /// through SQLite, once from its page), so this can exceed the rows really lost.
    pub dropped: u64,
    /// Objects the damaged file's totals claimed, when they could be read: see
    /// [`RecoveryReport::lost`].
    pub claimed: Option<u64>,
    /// Where the damaged file was kept: only when objects or names were or may have been
    /// lost.
    pub damaged_copy: Option<PathBuf>,
    /// Names carried into the new file (each pointing to a recovered object).
    pub names_recovered: u64,
    /// Names the damaged file's totals claimed, when they could be read.
    pub names_claimed: Option<u64>,
}

impl RecoveryReport {
    /// The report of a check that found the file sound.
    pub(crate) fn sound(trigger: Trigger, objects: u64) -> Self {
        RecoveryReport {
            trigger,
            problem: None,
            recovered: objects,
            dropped: 0,
            claimed: None,
            damaged_copy: None,
            names_recovered: 0,
            names_claimed: None,
        }
    }

    /// Objects the stash recorded before the damage that are not in it now, when the old
    /// totals could be read.
    #[must_use]
    pub fn lost(&self) -> Option<u64> {
        self.claimed.map(|claimed| claimed.saturating_sub(self.recovered))
    }

    /// Names the stash recorded before the damage that are not in it now (their objects
    /// were lost, or the names table was damaged), when the old totals could be read.
    #[must_use]
    pub fn lost_names(&self) -> Option<u64> {
        self.names_claimed.map(|claimed| claimed.saturating_sub(self.names_recovered))
    }

    /// Whether the stash was rebuilt and objects or names were, or may have been, lost:
    /// rows dropped, objects or names missing against the old totals, or old totals that
    /// could not be read. This is the news a user must always get.
    #[must_use]
    pub fn lost_anything(&self) -> bool {
        self.problem.is_some()
            && (self.dropped > 0
                || self.lost().is_none_or(|lost| lost > 0)
                || self.lost_names() != Some(0))
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(problem) = &self.problem else {
            return match self.trigger {
                Trigger::UncleanShutdown => write!(
                    f,
                    "the stash was not closed cleanly; it checked sound and holds {} objects",
                    self.recovered
                ),
                Trigger::Repair | Trigger::DamageFound => write!(
                    f,
                    "the stash checked sound ({} objects, all intact): nothing to repair",
                    self.recovered
                ),
            };
        };
        write!(f, "rebuilt a damaged stash ({problem}): kept {} objects", self.recovered)?;
        match self.lost() {
            Some(0) => write!(f, ", all it recorded")?,
            Some(lost) => write!(
                f,
                " of the {} it recorded: {lost} objects are lost",
                self.claimed.unwrap_or_default()
            )?,
            None => write!(f, "; what it held before is unknown, so objects may be lost")?,
        }
        if self.dropped > 0 {
            write!(f, "; {} damaged rows dropped", self.dropped)?;
        }
        match self.lost_names() {
            Some(0) if self.names_recovered == 0 => {}
            Some(0) => write!(f, "; kept all {} names", self.names_recovered)?,
            Some(lost) => write!(
                f,
                "; kept {} of {} names: {lost} names are lost",
                self.names_recovered,
                self.names_claimed.unwrap_or_default()
            )?,
            None => write!(f, "; kept {} names, of an unknown number", self.names_recovered)?,
        }
        match &self.damaged_copy {
            Some(copy) => write!(f, "; the damaged file is kept at {}", copy.display()),
            None => write!(f, "; nothing was lost, so the old file was not kept"),
        }
    }
}

/// Runs SQLite's integrity check; `None` when the file is sound, else what is wrong.
pub(crate) fn check(conn: &Connection) -> Option<String> {
    let result: rusqlite::Result<Vec<String>> = (|| {
        let mut stmt = conn.prepare("PRAGMA integrity_check(20)")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect()
    })();
    match result {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => None,
        Ok(lines) => Some(format!("integrity check: {}", lines.join("; "))),
        Err(e) => Some(format!("integrity check failed to run: {e}")),
    }
}
