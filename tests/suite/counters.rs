//! What a stash served: hits, misses, lookups and saves, counted by each handle and kept in
//! the stash, so that every process's calls count. Across processes with real children
//! (this test binary run again with `counters::counters_child`).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use objstash::{Counters, Key, Stash};

use crate::common::{TestResult, sibling, spawn_child};

const CHILD_ENV: &str = "OBJSTASH_COUNTERS_CHILD";

fn object(i: u64) -> Vec<u8> {
    format!(r#"{{"speckle_type":"Base","id":{i},"payload":"{}"}}"#, "x".repeat(40)).into_bytes()
}

/// What one child does: saves 2 new objects and 1 stored one, then reads 3 stored objects
/// and 2 absent ones, one by one and as a `get_many`, and looks 2 keys up. Then, by `ROLE`,
/// closes (`close`) or says it is done in `<db>.acked` and waits to be killed (`stay`).
/// Spec: `ROLE|DB|FIRST`: objects `FIRST..` are its new ones.
#[test]
#[ignore = "run as a child process by the counters tests"]
fn counters_child() -> TestResult {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return Ok(()) };
    let mut parts = spec.split('|');
    let (role, db, first) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default().parse::<u64>()?,
    );
    let stash = Stash::open(db)?;
    child_calls(&stash, first)?;
    match role {
        "close" => stash.close()?,
        "stay" => {
            std::fs::write(sibling(Path::new(db), ".acked"), "done")?;
            loop {
                std::thread::park();
            }
        }
        _ => anyhow::bail!("unknown role {role}"),
    }
    Ok(())
}

/// The calls of [`counters_child`]: 2 saved new and 1 again, committed; then 5 hits, 4
/// misses, 1 found and 1 absent, which no save's commit carries.
fn child_calls(stash: &Stash, first: u64) -> TestResult {
    stash.save_all(&[object(first), object(first + 1), object(0)])?;
    stash.flush()?;
    let absent = [Key::of(b"never saved 1"), Key::of(b"never saved 2")];
    for i in 0..3 {
        assert!(stash.get(&Key::of(&object(i)))?.is_some());
    }
    assert!(stash.get(&absent[0])?.is_none());
    let many = stash.get_many(&[Key::of(&object(3)), Key::of(&object(4)), absent[0], absent[1]])?;
    assert_eq!(many.iter().filter(|o| o.is_some()).count(), 2);
    assert!(stash.get(&absent[1])?.is_none());
    assert_eq!(stash.missing(&[Key::of(&object(0)), absent[0]])?, vec![absent[0]]);
    Ok(())
}

/// A stash with objects 0..10 saved and committed, counted from then on.
fn stash_of_ten(dir: &Path) -> objstash::Result<Stash> {
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(dir.join("s.db"))?;
    stash.save_all(&(0..10).map(object).collect::<Vec<_>>())?;
    stash.reset_counters()?;
    Ok(stash)
}

fn counts(c: &Counters) -> [u64; 8] {
    [c.hits, c.misses, c.found, c.absent, c.saved, c.saved_again, c.read_throughs, c.evicted]
}

#[test]
fn each_key_read_looked_up_or_saved_counts_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = stash_of_ten(dir.path())?;
    let before = stash.handle_counters();
    child_calls(&stash, 100)?;
    let handle = stash.handle_counters();
    let mut only_these = handle.clone();
    for (now, then) in [
        (&mut only_these.hits, before.hits),
        (&mut only_these.saved, before.saved),
        (&mut only_these.saved_again, before.saved_again),
    ] {
        *now -= then;
    }
    assert_eq!(counts(&only_these), [5, 4, 1, 1, 2, 1, 0, 0], "{only_these:?}");
    // The stash counts from its reset: exactly these calls.
    let stash_counts = stash.counters()?;
    assert_eq!(counts(&stash_counts), [5, 4, 1, 1, 2, 1, 0, 0], "{stash_counts:?}");
    assert_eq!(stash_counts.hit_rate(), Some(5.0 / 9.0));
    assert!(stash_counts.since.is_some_and(|t| t <= SystemTime::now()));
    assert_eq!(stash.stats()?.counters, stash_counts);
    // Names, models and readers count too; the library's own reads (verify) do not.
    stash.save_named(&[("a name", object(1))])?;
    assert!(stash.get_named(&["a name", "no such name"])?[0].is_some());
    let model = stash.save_model(&object(50), &[object(51), object(52)])?;
    assert_eq!(stash.read_model(&model.root)?.map(|o| o.len()), Some(3));
    assert!(stash.read_model(&Key::of(b"no model"))?.is_none());
    assert!(stash.open_reader(&Key::of(&object(2)))?.is_some());
    assert!(stash.verify()?.is_ok());
    assert!(stash.contains(&Key::of(&object(2)))?);
    let after = stash.counters()?;
    assert_eq!(after.hits - stash_counts.hits, 1 + 3 + 1, "{after:?}");
    assert_eq!(after.misses - stash_counts.misses, 2, "{after:?}");
    assert_eq!(after.found - stash_counts.found, 1, "{after:?}");
    stash.close()?;
    Ok(())
}

#[test]
fn every_process_reads_count_in_the_stash_once_it_closes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = stash_of_ten(dir.path())?;
    let db = dir.path().join("s.db");
    let mut children = Vec::new();
    for (i, first) in [(0, 100), (1, 200)] {
        let spec = format!("close|{}|{first}", db.display());
        children.push((i, spawn_child("counters::counters_child", CHILD_ENV, spec)?));
    }
    child_calls(&stash, 300)?;
    for (i, mut child) in children {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "child {i} failed: {status}");
    }
    let all = stash.counters()?;
    // Three processes, each 5 hits, 4 misses, 1 found, 1 absent, 2 new, 1 again.
    assert_eq!(counts(&all), [15, 12, 3, 3, 6, 3, 0, 0], "{all:?}");
    // The handle counts its own calls alone.
    let own = stash.handle_counters();
    assert_eq!((own.misses, own.found, own.absent), (4, 1, 1), "{own:?}");
    stash.close()?;
    // And the stash keeps them.
    assert_eq!(counts(&Stash::open(&db)?.counters()?), [15, 12, 3, 3, 6, 3, 0, 0]);
    Ok(())
}

#[test]
fn an_idle_handle_records_its_counts_without_a_write_of_its_own() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = stash_of_ten(dir.path())?;
    let db = dir.path().join("s.db");
    let spec = format!("stay|{}|100", db.display());
    let mut child = spawn_child("counters::counters_child", CHILD_ENV, spec)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(sibling(&db, ".acked")).unwrap_or_default() != "done" {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited early");
        anyhow::ensure!(Instant::now() < deadline, "the child did not finish its calls");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The child stays open and idle after its reads, which no commit of its saves carried:
    // its writer records them on its own; once they show, a kill loses none of them.
    loop {
        let counters = stash.counters()?;
        if counters.misses == 4 && counters.hits == 5 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the idle child's counts never showed");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill()?;
    child.wait()?;
    // Its saves were committed with the counts at the latest; one was stored already.
    let counters = stash.counters()?;
    assert_eq!(counts(&counters), [5, 4, 1, 1, 2, 1, 0, 0], "{counters:?}");
    stash.close()?;
    Ok(())
}

#[test]
fn two_handles_saving_one_object_at_once_count_it_new_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let a = stash_of_ten(dir.path())?;
    let b = Stash::open(dir.path().join("s.db"))?;
    let a_before = a.handle_counters();
    // Each handle may take it for new (neither sees the other's pending row): the writer
    // that finds it stored counts it saved again.
    for i in 0..50 {
        a.save(&object(1000 + i))?;
        b.save(&object(1000 + i))?;
    }
    a.flush()?;
    b.flush()?;
    let counters = b.counters()?;
    let a_counts = a.handle_counters();
    let b_counts = b.handle_counters();
    let a_saved = a_counts.saved - a_before.saved;
    assert_eq!(a_saved + b_counts.saved, 50, "{a_counts:?} {b_counts:?}");
    assert_eq!(a_counts.saved_again + b_counts.saved_again, 50);
    assert_eq!(counters.saved + counters.saved_again, 100, "{counters:?}");
    assert_eq!(counters.saved, 50, "{counters:?}");
    a.close()?;
    b.close()?;
    Ok(())
}

#[test]
fn a_reset_counts_from_then_evictions_included_and_a_read_only_handle_counts_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("s.db");
    let stash = stash_of_ten(dir.path())?;
    let began = stash.counters()?.since.expect("counting began at the reset");
    assert_eq!(counts(&stash.counters()?), [0; 8]);
    for i in 0..3 {
        stash.get(&Key::of(&object(i)))?;
    }
    assert_eq!(stash.counters()?.hits, 3);
    stash.reset_counters()?;
    let reset = stash.counters()?;
    assert_eq!(counts(&reset), [0; 8], "{reset:?}");
    assert!(reset.since.expect("counting") >= began);
    // Evictions since the reset: a trim to nothing takes every object.
    let evicted = stash.trim_to(0)?;
    assert!(evicted.objects > 0);
    let after = stash.counters()?;
    assert_eq!(after.evicted, evicted.objects, "{after:?}");
    assert_eq!(after.evicted_bytes, evicted.stored_bytes);
    assert_eq!(stash.stats()?.evicted_objects, evicted.objects);
    stash.close()?;
    // A read-only handle counts its calls but cannot record them.
    let read_only = Stash::builder().read_only(true).open(&db)?;
    assert!(read_only.get(&Key::of(&object(0)))?.is_none());
    assert_eq!(read_only.handle_counters().misses, 1);
    assert_eq!(read_only.counters()?.misses, 0);
    Ok(())
}
