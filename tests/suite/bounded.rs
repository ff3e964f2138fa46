//! A stash within its size: the cap and what counts toward it, least-recently-used order,
//! expiry, pins, cap changes (and the file shrinking), caps smaller than one object, names
//! of evicted objects, a stash from before uses were recorded, and two processes sharing
//! one capped stash. Every test ends with `verify`, which recounts the totals.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{LAYOUTS, MODES, TestResult, noise};
use objstash::{Key, Layout, Stash, StashBuilder, Values};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const CHILD_ENV: &str = "OBJSTASH_BOUNDED_CHILD";

/// Incompressible objects of `len` bytes: stored bytes are raw bytes, so sizes are exact.
fn blobs(seed: u64, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n as u64).map(|i| noise(seed * 1_000_003 + i, len)).collect()
}

/// Exact least-recently-used order: no grace period, and every read records its use.
fn builder(layout: Layout) -> StashBuilder {
    Stash::builder().layout(layout).eviction_grace(Duration::ZERO).use_resolution(Duration::ZERO)
}

/// Milliseconds since the Unix epoch: the clock uses are recorded in.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Waits until the clock that uses are recorded in has passed every use made so far: a use
/// at the very millisecond an eviction starts counts as recent (within a grace period of
/// zero), so a test that wants it to go waits for the next millisecond first.
fn past_every_use() {
    let last = now_ms();
    while now_ms() <= last {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Evicts what was last used before `cut` (milliseconds since the epoch), which must lie
/// at least `margin` ms before any use that is to stay. `evict_unused_since` takes an age,
/// which the library turns into a time when it runs: the cut it applies is `cut` plus the
/// time the call took to get there. `None` when that time reached the margin, so that the
/// cut may have passed a use that was to stay: the caller runs its scenario again.
fn evict_before(stash: &Stash, cut: i64, margin: i64) -> objstash::Result<Option<u64>> {
    let before = now_ms();
    let age = Duration::from_millis((before - cut).max(0) as u64);
    let evicted = stash.evict_unused_since(age)?;
    Ok((now_ms() - before < margin).then_some(evicted.objects))
}

/// Where a capped stash may keep its values: each test of a cap runs with both.
const PLACES: [Values; 2] = [Values::InRows, Values::InFile];

/// The database files' bytes, as `ls -l` adds them up; the file of values by its blocks on
/// disk (compaction punches holes in it, and its length stays).
fn file_bytes(path: &Path) -> u64 {
    ["", "-wal", "-journal", "-values"].iter().map(|suffix| file_bytes_of(path, suffix)).sum()
}

/// The bytes of each of the database's files, for a message.
fn parts(path: &Path) -> String {
    let [main, log, values] = ["", "-wal", "-values"].map(|suffix| file_bytes_of(path, suffix));
    format!("main {main}, log {log}, values {values}")
}

/// The bytes of one of the database's files, by its suffix.
fn file_bytes_of(path: &Path, suffix: &str) -> u64 {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    let meta = std::fs::metadata(PathBuf::from(name));
    match suffix {
        "-values" => meta.map_or(0, |m| m.blocks() * 512),
        _ => meta.map_or(0, |m| m.len()),
    }
}

/// Waits until the stash's files fit `bytes` (the writer evicts between batches, in the
/// background); fails after two minutes (a hang). The stated margin is 5% over the cap: the write-ahead
/// log of one transaction can pass its share with rows of whole pages, as here.
fn wait_within(stash: &Stash, bytes: u64) -> TestResult {
    let start = Instant::now();
    loop {
        stash.flush()?;
        let size = file_bytes(stash.path());
        if size <= bytes {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the files stayed at {size} bytes (main {}, in use {}, log {}, values {}), over \
             {bytes}: {}",
            std::fs::metadata(stash.path())?.len(),
            in_use(stash.path())?,
            file_bytes_of(stash.path(), "-wal"),
            file_bytes_of(stash.path(), "-values"),
            stash.stats()?
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bytes of the database's pages in use, read by a connection of the test's own.
fn in_use(path: &Path) -> anyhow::Result<u64> {
    let conn = rusqlite::Connection::open(path)?;
    let get = |pragma: &str| -> rusqlite::Result<u64> {
        conn.pragma_query_value(None, pragma, |r| r.get::<_, i64>(0)).map(|v| v as u64)
    };
    Ok((get("page_count")? - get("freelist_count")?) * get("page_size")?)
}

fn assert_verified(stash: &Stash) -> TestResult {
    let report = stash.verify()?;
    anyhow::ensure!(report.is_ok(), "{report}");
    Ok(())
}

/// Indexes of uses in the stash at `path` (one a table once built).
fn use_indexes(path: &Path) -> anyhow::Result<usize> {
    let conn = rusqlite::Connection::open(path)?;
    let sql = "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name LIKE '%\\_used' \
               ESCAPE '\\'";
    Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as usize)
}

#[test]
fn uses_are_indexed_at_the_first_cap_or_eviction_and_not_before() -> TestResult {
    for layout in LAYOUTS {
        let tables = if layout == Layout::Bucketed { 256 } else { 1 };
        let dir = tempfile::tempdir()?;
        // A stash that never evicts keeps no index of uses, and still records them.
        let path = dir.path().join("uncapped.db");
        let stash = builder(layout).open(&path)?;
        let keys = stash.save_all(&blobs(21, 40, 2 * KIB as usize))?;
        stash.flush()?;
        assert_eq!(use_indexes(&path)?, 0, "{layout}");
        assert_eq!(stash.stats()?.oldest_use, None, "{layout}");
        // A cap builds it before `set_max_size` returns.
        stash.set_max_size(Some(64 * 1024 * 1024))?;
        assert_eq!(use_indexes(&path)?, tables, "{layout}");
        assert!(stash.stats()?.oldest_use.is_some(), "{layout}");
        // Taking the cap away keeps it; the next open finds it.
        stash.set_max_size(None)?;
        stash.close()?;
        let stash = builder(layout).open(&path)?;
        assert_eq!(use_indexes(&path)?, tables, "{layout}");
        past_every_use();
        assert_eq!(stash.evict_unused_since(Duration::ZERO)?.objects, keys.len() as u64);
        stash.close()?;

        // A one-off eviction builds it too, and evicts through it.
        let path = dir.path().join("evicted.db");
        let stash = builder(layout).open(&path)?;
        let keys = stash.save_all(&blobs(22, 40, 2 * KIB as usize))?;
        stash.flush()?;
        past_every_use();
        assert_eq!(stash.evict_unused_since(Duration::ZERO)?.objects, keys.len() as u64);
        assert_eq!(use_indexes(&path)?, tables, "{layout}");
        assert_verified(&stash)?;
        stash.close()?;

        // A stash opened with a cap has it from its first open.
        let path = dir.path().join("capped.db");
        let stash = builder(layout).max_size(64 * 1024 * 1024).open(&path)?;
        assert_eq!(use_indexes(&path)?, tables, "{layout}");
        stash.close()?;
    }
    Ok(())
}

#[test]
fn least_recently_used_go_first() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let stash = builder(layout).open(dir.path().join("lru.db"))?;
        // The first eviction indexes the uses (a page a table): done here, before the
        // empty stash is measured. It evicts nothing.
        assert_eq!(stash.evict_unused_since(Duration::from_secs(86_400))?.objects, 0);
        let empty = in_use(stash.path())?;
        // Four groups saved one after another, then the first read again: the order of
        // last use is groups 1, 2, 3, 0.
        let groups: Vec<Vec<Vec<u8>>> = (0..4).map(|g| blobs(g, 50, 16 * KIB as usize)).collect();
        let mut keys = Vec::new();
        for group in &groups {
            keys.push(stash.save_all(group)?);
            stash.flush()?;
            std::thread::sleep(Duration::from_millis(20));
        }
        for key in &keys[0] {
            assert!(stash.get(key)?.is_some());
        }
        let full = in_use(stash.path())?;
        // Room for a little more than two of the four groups.
        let target = empty + (full - empty) * 55 / 100;
        let evicted = stash.trim_to(target)?;
        assert!(evicted.objects >= 50, "{layout}: {evicted}");
        // The files as the trim left them (the reads' counts rode along with its
        // transactions; the lookups below count, and their record may come at any time).
        let stats = stash.stats()?;
        assert!(stats.file_bytes <= target, "{layout}: {stats}");
        let present = |g: usize| -> objstash::Result<usize> {
            Ok(keys[g].len() - stash.missing(&keys[g])?.len())
        };
        assert_eq!(present(1)?, 0, "{layout}: the least recently used group stayed");
        assert_eq!(present(0)?, 50, "{layout}: the group read last was evicted");
        assert_eq!(present(3)?, 50, "{layout}: the group saved last was evicted");
        // Whatever is left of group 2 was the next in line.
        assert_eq!(stats.objects, 100 + present(2)? as u64);
        assert_eq!(stats.evicted_objects, evicted.objects);
        assert_verified(&stash)?;
        // Evicted objects can be saved again.
        stash.save_all(&groups[1])?;
        assert!(stash.missing(&keys[1])?.is_empty());
        assert_verified(&stash)?;
    }
    Ok(())
}

#[test]
fn a_cap_keeps_the_files_within_it_in_every_mode() -> TestResult {
    for (layout, values) in LAYOUTS.into_iter().flat_map(|l| PLACES.map(|v| (l, v))) {
        for durability in MODES {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("capped.db");
            // Bucketed stashes start at ~4.3 MiB of empty tables and indexes, and at 8.2 MiB
            // once capped with their values in a file (the indexes of uses and places).
            let cap = match (layout, values) {
                (Layout::Bucketed, Values::InFile) => 12 * MIB,
                (Layout::Bucketed, _) => 9 * MIB,
                _ => 4 * MIB,
            };
            let stash =
                builder(layout).values(values).durability(durability).max_size(cap).open(&path)?;
            let mut largest = 0;
            for round in 0..12 {
                stash.save_all(&blobs(100 + round, 64, 8 * KIB as usize))?;
                stash.flush()?;
                largest = largest.max(file_bytes(&path));
            }
            wait_within(&stash, cap + cap / 20)?;
            // The writer goes on evicting down to its low-water mark and compacting what
            // that leaves dead: through a hundred more of its steps, the files stay within.
            for _ in 0..100 {
                stash.flush()?;
                let parts = parts(&path);
                assert!(
                    file_bytes(&path) <= cap + cap / 20,
                    "{layout}/{durability}/{values}: {parts}"
                );
            }
            let stats = stash.stats()?;
            assert!(stats.evicted_objects > 0, "{layout}/{durability}/{values}: {stats}");
            assert_eq!(stats.max_size, Some(cap));
            // Rows of 8 KiB take two pages each: the log of one batch can pass its share.
            let parts = format!("{layout}/{durability}/{values}: {}", parts(&path));
            assert!(stats.file_bytes <= cap + cap / 20, "{parts}\n{stats}");
            // Between two checks the files may grow by about one batch; a file of values
            // also holds the segment (1 MiB) that eviction has emptied and compaction not
            // yet given back.
            let segment = if values == Values::InFile { MIB } else { 0 };
            let peak = format!("{layout}/{durability}/{values}: peak {largest} of {cap}");
            assert!(largest <= cap + cap / 4 + segment, "{peak}");
            assert_verified(&stash)?;
            stash.close()?;
            // The cap is recorded: a plain open keeps it.
            let stash = Stash::open(&path)?;
            assert_eq!(stash.max_size()?, Some(cap));
        }
    }
    Ok(())
}

#[test]
fn pins_are_never_evicted_and_count_toward_the_cap() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let stash = builder(layout).open(dir.path().join("pins.db"))?;
        let local = blobs(7, 40, 16 * KIB as usize);
        let pinned = stash.save_pinned(&local)?;
        let cached = stash.save_all(&blobs(8, 40, 16 * KIB as usize))?;
        // Pinning is idempotent and answers whether each object is stored.
        assert_eq!(stash.pin(&[pinned[0], Key::of(b"not stored")])?, [true, false]);
        assert!(stash.is_pinned(&pinned[0])? && !stash.is_pinned(&cached[0])?);
        let stats = stash.stats()?;
        let pinned_bytes = stats.stored_bytes / 2;
        assert_eq!((stats.pinned_objects, stats.pinned_bytes), (40, pinned_bytes));

        // A trim to nothing takes every cached object and no pinned one.
        past_every_use();
        let evicted = stash.trim_to(0)?;
        assert_eq!(evicted.objects, 40, "{layout}");
        assert!(stash.missing(&pinned)?.is_empty());
        assert_eq!(stash.missing(&cached)?.len(), 40);
        // Pins alone over the cap: saving still works, and stats says so.
        stash.set_max_size(Some(256 * KIB))?;
        let more = stash.save_all(&blobs(9, 4, 16 * KIB as usize))?;
        assert!(stash.missing(&more)?.is_empty() || stash.flush().is_ok());
        let stats = stash.stats()?;
        assert!(stats.over_cap(), "{stats}");
        assert!(stats.to_string().contains("pinned objects alone exceed it"), "{stats}");
        assert_verified(&stash)?;

        // Unpinned, they go like any other object.
        assert_eq!(stash.unpin(&pinned[..20])?, vec![true; 20]);
        assert_eq!(stash.unpin(&pinned[..1])?, [false]);
        past_every_use();
        stash.trim_to(0)?;
        assert_eq!(stash.missing(&pinned[..20])?.len(), 20);
        assert!(stash.missing(&pinned[20..])?.is_empty());
        // A pinned object removed explicitly is gone, and its pin with it.
        assert!(stash.remove(&pinned[39])?);
        let stats = stash.stats()?;
        assert_eq!((stats.pinned_objects, stats.pinned_bytes), (19, pinned_bytes / 40 * 19));
        assert_verified(&stash)?;
    }
    Ok(())
}

#[test]
fn objects_unused_for_a_while_expire() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("expiry.db");
        // The cut falls between the old group's save and the reads and saves after it; a
        // run where the eviction's own call took too long to tell is done again.
        let (old, read_again, new, evicted) = loop {
            let _ = std::fs::remove_file(&path);
            let stash = builder(layout).open(&path)?;
            let old = stash.save_all(&blobs(1, 30, 4 * KIB as usize))?;
            let read_again = stash.save_all(&blobs(2, 30, 4 * KIB as usize))?;
            stash.flush()?;
            let saved = now_ms();
            std::thread::sleep(Duration::from_millis(400));
            let reading = now_ms();
            for key in &read_again {
                stash.get(key)?;
            }
            let new = stash.save_all(&blobs(3, 30, 4 * KIB as usize))?;
            let cut = (saved + reading) / 2;
            if let Some(evicted) = evict_before(&stash, cut, reading - cut)? {
                stash.close()?;
                break (old, read_again, new, evicted);
            }
            stash.close()?;
        };
        assert_eq!(evicted, 30, "{layout}: {evicted}");
        let stash = builder(layout).open(&path)?;
        assert_eq!(stash.missing(&old)?.len(), 30);
        assert!(stash.missing(&read_again)?.is_empty() && stash.missing(&new)?.is_empty());
        let stats = stash.stats()?;
        // Incompressible objects are stored with a gzip header and trailer.
        assert!((30 * 4 * KIB..31 * 4 * KIB).contains(&stats.evicted_bytes), "{stats}");
        assert_verified(&stash)?;
        stash.close()?;

        // With a grace period, nothing used within it expires (an hour: far longer than
        // this test takes, however busy the machine).
        let stash = Stash::builder().eviction_grace(Duration::from_secs(3600)).open(&path)?;
        assert_eq!(stash.evict_unused_since(Duration::ZERO)?.objects, 0);
        stash.close()?;
        // Without one, everything used before now goes.
        past_every_use();
        let stash = builder(layout).open(&path)?;
        assert_eq!(stash.evict_unused_since(Duration::ZERO)?.objects, 60);
        assert_verified(&stash)?;
    }
    Ok(())
}

/// A burst of saves runs ahead of eviction, which goes on between batches; once the handle
/// is closed the files fit the cap: the closing writer finishes what the cap owes.
#[test]
fn a_closed_stash_fits_its_cap_after_a_burst() -> TestResult {
    for (layout, values) in LAYOUTS.into_iter().flat_map(|l| PLACES.map(|v| (l, v))) {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("burst.db");
        let cap = if layout == Layout::Bucketed { 12 * MIB } else { 4 * MIB };
        let stash = builder(layout).values(values).max_size(cap).open(&path)?;
        for round in 0..10 {
            stash.save_all(&blobs(40 + round, 64, 4 * KIB as usize))?;
        }
        // One call of three times the cap: nothing it saves is evicted before it returns, so
        // most of the eviction is left for after it.
        stash.save_all(&blobs(60, (3 * cap / (4 * KIB)) as usize, 4 * KIB as usize))?;
        stash.close()?;
        let closed = file_bytes(&path);
        let after = format!("{layout}/{values}: {closed} bytes after closing, cap {cap}");
        assert!(closed <= cap + cap / 20, "{after}");
        let stash = builder(layout).open(&path)?;
        assert!(stash.stats()?.evicted_objects > 0);
        assert_verified(&stash)?;
    }
    Ok(())
}

#[test]
fn lowering_the_cap_shrinks_the_file_and_raising_it_evicts_nothing() -> TestResult {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shrink.db");
        let stash = builder(layout).open(&path)?;
        let empty = in_use(&path)?;
        let keys = stash.save_all(&blobs(4, 800, 16 * KIB as usize))?;
        stash.flush()?;
        let full = file_bytes(&path);
        assert!(full > 12 * MIB, "{full}");

        // A generous cap changes nothing.
        stash.set_max_size(Some(4 * full))?;
        stash.flush()?;
        assert_eq!(stash.stats()?.objects, 800);

        // A lower one evicts in the background and gives the pages back: the main file
        // itself shrinks.
        let cap = if layout == Layout::Bucketed { 10 * MIB } else { 5 * MIB };
        stash.set_max_size(Some(cap))?;
        wait_within(&stash, cap + cap / 20)?;
        let main_file = std::fs::metadata(&path)?.len();
        assert!(main_file <= cap, "{layout}: the file stayed at {main_file}");
        let left = 800 - stash.missing(&keys)?.len() as u64;
        assert_eq!(stash.stats()?.objects, left);
        // Each object takes three pages (24 KiB).
        let room = (cap - empty) / (24 * KIB);
        assert!(left > room * 3 / 4, "{layout}: only {left} objects of {room} kept under {cap}");

        // Raised again: nothing more goes, and new saves grow the file.
        stash.set_max_size(Some(full * 2))?;
        stash.save_all(&blobs(5, 100, 16 * KIB as usize))?;
        stash.flush()?;
        assert_eq!(stash.stats()?.objects, left + 100);
        // No cap at all.
        stash.set_max_size(None)?;
        assert_eq!(stash.max_size()?, None);
        assert!(stash.set_max_size(Some(0)).is_err());
        assert_verified(&stash)?;
    }
    Ok(())
}

#[test]
fn an_object_larger_than_the_cap_is_stored_then_evicted_first() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tiny.db");
    // With a grace period (an hour here: longer than any stall of a busy machine), a
    // caller's save then get never races an eviction.
    let stash =
        Stash::builder().max_size(1).eviction_grace(Duration::from_secs(3600)).open(&path)?;
    let big = noise(9, 300 * KIB as usize);
    let key = stash.save(&big)?;
    // The writer evicts between batches: after the second flush, it has run once since
    // the save was committed.
    stash.flush()?;
    stash.flush()?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&big[..]));
    assert!(stash.stats()?.over_cap());
    stash.close()?;
    // Without one, it goes at the writer's next check.
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(&path)?;
    let other = stash.save(&noise(10, 300 * KIB as usize))?;
    let start = Instant::now();
    while stash.contains(&key)? || stash.contains(&other)? {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(120), "{}", stash.stats()?);
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.evicted_objects), (0, 2));
    assert_verified(&stash)?;
    assert!(Stash::builder().max_size(0).open(&path).is_err());
    Ok(())
}

/// Saves two groups of objects 300 ms apart on a stash with `resolution`, waits 300 ms,
/// reads the first group back (by `get` and by `get_many`), then evicts what was last used
/// before a cut between the second save and the reads. Returns which groups are left: the
/// second never, the first if its read was recorded. `None` when the eviction's call took
/// too long for the cut to be sure (the caller runs it again).
fn read_then_evict(resolution: Duration) -> anyhow::Result<Option<(bool, bool)>> {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder()
        .eviction_grace(Duration::ZERO)
        .use_resolution(resolution)
        .open(dir.path().join("resolution.db"))?;
    let first = stash.save_all(&blobs(14, 10, KIB as usize))?;
    stash.flush()?;
    std::thread::sleep(Duration::from_millis(300));
    let second = stash.save_all(&blobs(15, 10, KIB as usize))?;
    stash.flush()?;
    let second_saved = now_ms();
    std::thread::sleep(Duration::from_millis(300));
    let reading = now_ms();
    for key in &first[..5] {
        assert!(stash.get(key)?.is_some());
    }
    assert!(stash.get_many(&first[5..])?.iter().all(Option::is_some));
    let cut = (second_saved + reading) / 2;
    if evict_before(&stash, cut, reading - cut)?.is_none() {
        return Ok(None);
    }
    let left = |keys: &[Key]| -> anyhow::Result<bool> {
        let missing = stash.missing(keys)?.len();
        anyhow::ensure!(missing == 0 || missing == keys.len(), "{missing} of a group evicted");
        Ok(missing == 0)
    };
    let groups = (left(&first)?, left(&second)?);
    assert_verified(&stash)?;
    Ok(Some(groups))
}

/// [`read_then_evict`] until a run could tell.
fn read_then_evict_surely(resolution: Duration) -> anyhow::Result<(bool, bool)> {
    loop {
        if let Some(groups) = read_then_evict(resolution)? {
            return Ok(groups);
        }
    }
}

#[test]
fn a_read_records_a_use_only_past_the_resolution() -> TestResult {
    // Read back within the resolution (an hour: longer than the test, however busy the
    // machine): the first group's use stays its save.
    let (first, second) = read_then_evict_surely(Duration::from_secs(3600))?;
    assert!(!first && !second, "within the resolution: first left {first}, second {second}");
    // Read back past it: the read is the newest use.
    let (first, second) = read_then_evict_surely(Duration::from_millis(100))?;
    assert!(first && !second, "past the resolution: first left {first}, second {second}");
    Ok(())
}

#[test]
fn evicted_objects_take_their_names_with_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = builder(Layout::Single).open(dir.path().join("names.db"))?;
    let objects = blobs(11, 20, 4 * KIB as usize);
    let named: Vec<(String, &Vec<u8>)> =
        objects.iter().enumerate().map(|(i, o)| (format!("id-{i}"), o)).collect();
    stash.save_named(&named)?;
    stash.flush()?;
    std::thread::sleep(Duration::from_millis(20));
    assert!(stash.get_named(&["id-3"])?[0].is_some());
    past_every_use();
    stash.trim_to(0)?;
    assert!(stash.get_named(&["id-3"])?[0].is_none());
    assert_eq!(stash.resolve(&["id-4"])?, [None]);
    assert_eq!(stash.stats()?.names, 0);
    assert_verified(&stash)?;
    Ok(())
}

#[test]
fn a_stash_from_before_uses_is_upgraded_at_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("old.db");
    let keys = {
        let stash = Stash::open(&path)?;
        let keys = stash.save_all(&blobs(12, 10, KIB as usize))?;
        stash.close()?;
        keys
    };
    // What a stash made by an earlier version looks like: no use column or index, and
    // no incremental vacuum.
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch(
        "DROP INDEX IF EXISTS objects_used; ALTER TABLE objects DROP COLUMN used;
         PRAGMA auto_vacuum = NONE; VACUUM;",
    )?;
    drop(conn);
    let before = std::time::SystemTime::now();
    let stash = builder(Layout::Single).open(&path)?;
    // Its objects count as used at the upgrade; the order of uses is indexed at the first
    // eviction (this one evicts nothing), not before.
    assert_eq!(stash.stats()?.oldest_use, None);
    assert_eq!(stash.evict_unused_since(Duration::from_secs(3600))?.objects, 0);
    let stats = stash.stats()?;
    assert!(stats.oldest_use.is_some_and(|t| t + Duration::from_secs(1) >= before), "{stats}");
    assert_eq!(stash.pin(&keys[..1])?, [true]);
    past_every_use();
    assert_eq!(stash.trim_to(0)?.objects, 9);
    assert_verified(&stash)?;
    // Its free pages are given back too: a trim rewrites it once with incremental vacuum.
    let more = stash.save_all(&blobs(13, 300, 16 * KIB as usize))?;
    stash.flush()?;
    let full = std::fs::metadata(&path)?.len();
    past_every_use();
    stash.trim_to(MIB)?;
    let evicted = stash.missing(&more)?.len();
    assert!(evicted > 200 && evicted < 300, "{evicted}: {}", stash.stats()?);
    let vacuum: i64 =
        rusqlite::Connection::open(&path)?.pragma_query_value(None, "auto_vacuum", |r| r.get(0))?;
    assert_eq!(vacuum, 2, "still not incremental");
    let now = file_bytes(&path);
    assert!(now <= MIB, "the file stayed at {now} bytes (was {full})");
    assert_verified(&stash)?;
    Ok(())
}

/// What a child process does: `DB|SEED`: saves 30 rounds of objects into the capped stash
/// (no grace period: both processes evict whatever is oldest, the other's objects too),
/// reading back what it saved, and prints `DONE`.
#[test]
#[ignore = "run as a child process by the bounded tests"]
fn bounded_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let [db, seed] = spec.split('|').collect::<Vec<_>>()[..] else { anyhow::bail!("{spec}") };
    let seed: u64 = seed.parse()?;
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(db)?;
    for round in 0..30 {
        let objects = blobs(seed * 100 + round, 32, 8 * KIB as usize);
        let keys = stash.save_all(&objects)?;
        // The other process may have evicted some already: what is read is right.
        for (key, object) in keys.iter().zip(&objects) {
            let read = stash.get(key)?;
            anyhow::ensure!(read.is_none() || read.as_ref() == Some(object), "wrong bytes {key}");
        }
        stash.flush()?;
    }
    stash.close()?;
    println!("DONE");
    Ok(())
}

#[test]
fn two_processes_share_one_cap() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shared.db");
    let cap = 4 * MIB;
    Stash::builder().max_size(cap).open(&path)?.close()?;
    let exe = std::env::current_exe()?;
    let children: Vec<_> = (1..=2)
        .map(|seed| {
            Command::new(&exe)
                .args(["--ignored", "--exact", "bounded::bounded_child", "--nocapture"])
                .env(CHILD_ENV, format!("{}|{seed}", path.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for child in children {
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            out.status.success() && stdout.contains("DONE"),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // 2 x 30 x 32 objects of 8 KiB (15 MiB) went through a 4 MiB cap.
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(&path)?;
    wait_within(&stash, cap + cap / 20)?;
    let stats = stash.stats()?;
    assert!(stats.evicted_objects > 1_000, "{stats}");
    assert_verified(&stash)?;
    Ok(())
}
