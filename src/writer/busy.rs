//! How the writer waits for another process's write lock: every millisecond or so, not by
//! SQLite's own backoff, which sleeps up to 100 ms between tries. Another writer that
//! works in short steps (a trim, a large declaration: each step one transaction) leaves the
//! lock free for moments between its steps; tries 100 ms apart rarely land in one, and a
//! save beside a long trim waited for the whole trim (10 s). Tried every millisecond, a
//! wait ends at the next free moment.

use std::cell::Cell;
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// The pause between two tries.
const TRY_EVERY: Duration = Duration::from_millis(1);

thread_local! {
    /// The longest wait of the writer on this thread.
    static LIMIT: Cell<Duration> = const { Cell::new(Duration::from_secs(30)) };
    /// When the wait under way began.
    static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Makes `conn`, the writer's connection, which this thread runs, wait for a lock by
/// trying every millisecond, for at most `limit`.
pub(super) fn wait_briefly(conn: &mut Connection, limit: Duration) -> rusqlite::Result<()> {
    LIMIT.with(|l| l.set(limit));
    conn.busy_handler(Some(try_again))
}

/// Runs `f` with the writer's waits for a lock limited to `limit` (a checkpoint that
/// must not wait, say), then as before.
pub(super) fn within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let before = LIMIT.with(|l| l.replace(limit));
    let done = f();
    LIMIT.with(|l| l.set(before));
    done
}

/// Whether to try again (`tries`: how many times it already did).
fn try_again(tries: i32) -> bool {
    let now = Instant::now();
    let since = SINCE.with(|s| {
        let since = match s.get() {
            Some(since) if tries > 0 => since,
            _ => now,
        };
        s.set(Some(since));
        since
    });
    if now.duration_since(since) >= LIMIT.with(Cell::get) {
        SINCE.with(|s| s.set(None));
        return false;
    }
    std::thread::sleep(TRY_EVERY);
    true
}
