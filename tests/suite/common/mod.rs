//! Helpers shared by the integration tests: temp stashes, objects and a tmpfs mount.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use objstash::{Durability, Layout, Stash};

#[cfg(feature = "remote")]
pub mod faulty;
mod tmpfs;
pub use tmpfs::Tmpfs;
#[cfg(feature = "remote")]
pub mod s3;

pub type TestResult = anyhow::Result<()>;

pub const LAYOUTS: [Layout; 2] = [Layout::Single, Layout::Bucketed];
pub const MODES: [Durability; 2] = [Durability::Fast, Durability::Safe];

/// Opens a new stash in `dir` with the given layout and durability.
pub fn open(dir: &Path, layout: Layout, durability: Durability) -> objstash::Result<Stash> {
    Stash::builder().layout(layout).durability(durability).open(dir.join("stash.db"))
}

/// `n` realistic objects of model `seed`.
pub fn objects(seed: u64, n: usize) -> Vec<Vec<u8>> {
    speckle_gen::objects(seed, 0, n)
}

/// Leaves the stash as a fast-mode session that ended with the machine (not only the
/// process) stopping: the unclean marker, and no record of this boot. The next open
/// checks the file and salvages it if it is damaged.
pub fn mark_unclean(path: &Path) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    conn.execute("UPDATE objstash_meta SET value = 'open-fast' WHERE name = 'state'", [])?;
    conn.execute("DELETE FROM objstash_meta WHERE name = 'boot'", [])?;
    Ok(())
}

/// `path` with `suffix` appended to its file name (`db.acked` beside `db`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A child process that is killed and reaped when it goes out of scope, so that a test
/// that fails half-way leaves no child running (the crash and sharing children loop
/// forever).
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn new(child: Child) -> Self {
        Reaped(Some(child))
    }

    /// The child, no longer killed on drop.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("only taken here and in drop")
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.0.as_ref().expect("only taken here and in drop")
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("only taken here and in drop")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the ignored test `test` (its full name, `module::test`) of this test binary as a
/// child process, with `spec` in the environment variable `env` telling it what to do;
/// its output is discarded.
pub fn spawn_child(test: &str, env: &str, spec: String) -> std::io::Result<Reaped> {
    Command::new(std::env::current_exe()?)
        .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(env, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped::new)
}

/// Waits until a crash test's child has opened the stash (it writes `open` to
/// `<db>.acked`), so that a kill lands in its write loop.
pub fn wait_until_open(db: &Path, child: &mut Child) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(sibling(db, ".acked")).unwrap_or_default().contains("open") {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the child exited early with {status}");
        }
        anyhow::ensure!(Instant::now() < deadline, "the child did not open the stash");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Deterministic pseudo-random bytes (incompressible).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    speckle_gen::noise(seed, len)
}

/// Makes at `path` an empty stash of format 1 as versions before format 5 made it: object
/// tables with a unique index on the whole key. Versions of this one read and write it as
/// it is.
pub fn format_1_stash(path: &Path, layout: Layout) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    let mut sql = String::from(
        "PRAGMA page_size = 8192; PRAGMA auto_vacuum = INCREMENTAL; BEGIN;
         CREATE TABLE objstash_meta(name TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;\n",
    );
    let tables: Vec<String> = match layout {
        Layout::Single => vec!["objects".to_string()],
        _ => (0..256).map(|i| format!("objects_{i:02x}")).collect(),
    };
    for name in &tables {
        sql += &format!(
            "CREATE TABLE {name}(rowid INTEGER PRIMARY KEY, key BLOB NOT NULL, \
             raw_len INTEGER NOT NULL, data BLOB NOT NULL, used INTEGER NOT NULL DEFAULT 0);
             CREATE UNIQUE INDEX {name}_key ON {name}(key);
             CREATE INDEX {name}_used ON {name}(used);\n"
        );
    }
    sql += &format!(
        "INSERT INTO objstash_meta(name, value) VALUES ('layout', '{layout}'), ('state', 'clean'),
         ('objects', 0), ('raw_bytes', 0), ('stored_bytes', 0);
         PRAGMA application_id = {};
         PRAGMA user_version = 1;
         COMMIT;",
        0x6f62_7374
    );
    conn.execute_batch(&sql)
}

/// The format version of the stash at `path`.
pub fn user_version(path: &Path) -> rusqlite::Result<i64> {
    rusqlite::Connection::open(path)?.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// The names of the object tables and their indexes in the stash at `path`, sorted.
pub fn object_schema(path: &Path) -> rusqlite::Result<Vec<String>> {
    let conn = rusqlite::Connection::open(path)?;
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') \
         AND name LIKE 'objects%' ORDER BY name",
    )?;
    let names = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(names)
}
