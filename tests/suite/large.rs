//! Large objects: streamed saves and reads, chunks shared between versions, one object to
//! remove, evict and verify, damage found at its chunk, and saves killed half-way (real
//! SIGKILLs) or made by two processes at once.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Reaped, TestResult, noise, sibling};
use objstash::{Error, Key, Stash};

/// Larger than the one-row limit (8 MiB), so saved in chunks.
const LARGE: usize = 20 << 20;

/// Compressible bytes: text-like lines with a counter, so chunks differ.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(
            format!("{{\"id\":\"{seed}-{i}\",\"speckle_type\":\"Objects.Geometry.Mesh\"}}\n")
                .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    out
}

fn open(dir: &Path) -> objstash::Result<Stash> {
    Stash::open(dir.join("stash.db"))
}

#[test]
fn a_large_object_round_trips_from_a_reader_and_from_bytes_under_one_key() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path())?;
    let object = text(1, LARGE + 12_345);
    let key = stash.save_reader(&object[..])?;
    assert_eq!(key, Key::of(&object));
    assert_eq!(stash.save(&object)?, key, "the same bytes saved whole have the same key");
    let path = dir.path().join("object.json");
    std::fs::write(&path, &object)?;
    assert_eq!(stash.save_file(&path)?, key);
    let stats = stash.stats()?;
    assert_eq!(stats.objects, 1, "{stats}");
    assert!(stats.chunks > 1, "{stats}");
    assert!(stats.chunk_bytes < object.len() as u64 / 4, "compressible chunks are gzipped");
    assert_eq!(stash.get(&key)?.as_deref(), Some(&object[..]));
    let mut read = Vec::new();
    stash.open_reader(&key)?.expect("stored").read_to_end(&mut read)?;
    assert_eq!(read, object);
    // A small object through the same call is one row, as `save` makes it.
    let small = stash.save_reader(&b"small"[..])?;
    assert_eq!(stash.get(&small)?.as_deref(), Some(&b"small"[..]));
    assert_eq!(stash.stats()?.chunks, stats.chunks);
    stash.close()?;
    // Reopened, it reads the same and verifies.
    let stash = open(dir.path())?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&object[..]));
    let report = stash.verify()?;
    assert!(report.is_ok() && report.chunks == stats.chunks, "{report}");
    Ok(())
}

#[test]
fn ranges_read_only_their_bytes_and_seeks_go_anywhere() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path())?;
    let object = noise(2, LARGE);
    let key = stash.save(&object)?;
    let mut reader = stash.open_reader(&key)?.expect("stored");
    assert_eq!((reader.len(), reader.key()), (object.len() as u64, key));
    for at in [0usize, 1, 65_535, 3 << 20, LARGE / 2 + 17, LARGE - 100] {
        reader.seek(SeekFrom::Start(at as u64))?;
        let mut buf = vec![0u8; 5_000];
        let n = read_full(&mut reader, &mut buf)?;
        let end = (at + 5_000).min(object.len());
        assert_eq!(&buf[..n], &object[at..end], "at {at}");
    }
    assert_eq!(reader.seek(SeekFrom::End(-10))?, object.len() as u64 - 10);
    let mut tail = Vec::new();
    reader.read_to_end(&mut tail)?;
    assert_eq!(tail, &object[object.len() - 10..]);
    assert!(reader.seek(SeekFrom::Current(-(object.len() as i64) - 1)).is_err());
    assert!(stash.open_reader(&Key::of(b"absent"))?.is_none());
    Ok(())
}

fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..])? {
            0 => break,
            read => n += read,
        }
    }
    Ok(n)
}

#[test]
fn two_versions_of_a_file_share_all_but_the_chunks_near_an_edit() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path())?;
    let first = noise(3, 3 * LARGE / 2);
    let mut second = first.clone();
    second.splice(first.len() / 2..first.len() / 2, b"an edit in the middle".iter().copied());
    let a = stash.save_reader(&first[..])?;
    let before = stash.stats()?;
    let b = stash.save_reader(&second[..])?;
    let after = stash.stats()?;
    let added = after.chunk_bytes - before.chunk_bytes;
    assert!(added < 3 << 20, "the second version added {added} bytes of {}", second.len());
    assert_eq!(after.objects, 2);
    // Removing one keeps every chunk the other needs, and removing both frees them all.
    assert!(stash.remove(&a)?);
    assert_eq!(stash.get(&b)?.as_deref(), Some(&second[..]));
    assert!(stash.get(&a)?.is_none());
    let report = stash.verify()?;
    assert!(report.is_ok(), "{report}");
    assert!(stash.remove(&b)?);
    let empty = stash.stats()?;
    assert_eq!((empty.objects, empty.chunks, empty.chunk_bytes), (0, 0, 0), "{empty}");
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn a_flipped_byte_in_a_chunk_fails_the_read_at_that_chunk_and_verify_names_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("stash.db");
    let object = noise(4, LARGE);
    let key = {
        let stash = Stash::open(&db)?;
        let key = stash.save(&object)?;
        stash.close()?;
        key
    };
    // Random bytes are stored as they are: flip one byte in the middle of the object.
    let at = LARGE / 2;
    {
        let conn = rusqlite::Connection::open(&db)?;
        let (rowid, data): (i64, Vec<u8>) = conn.query_row(
            "SELECT rowid, data FROM objstash_chunks WHERE instr(data, ?1) > 0",
            [&object[at..at + 64]],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let offset = data.windows(64).position(|w| w == &object[at..at + 64]).expect("found");
        let mut damaged = data;
        damaged[offset] ^= 0x01;
        conn.execute("UPDATE objstash_chunks SET data = ?1 WHERE rowid = ?2", (damaged, rowid))?;
    }
    let stash = Stash::open(&db)?;
    assert!(matches!(stash.get(&key), Err(Error::Corrupt { key: k, .. }) if k == key));
    let mut reader = stash.open_reader(&key)?.expect("stored");
    let mut good = vec![0u8; at - (1 << 20)];
    reader.read_exact(&mut good)?;
    assert_eq!(good, &object[..good.len()], "the chunks before the damage read");
    let mut rest = Vec::new();
    let err = reader.read_to_end(&mut rest).expect_err("the damaged chunk fails");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let inner = err.get_ref().and_then(|e| e.downcast_ref::<Error>());
    assert!(matches!(inner, Some(Error::Corrupt { key: k, .. }) if *k == key), "{err}");
    assert!(good.len() + rest.len() <= at, "no byte of the damaged chunk was returned");
    let report = stash.verify()?;
    assert_eq!(report.corrupt, vec![key], "{report}");
    Ok(())
}

#[test]
fn a_capped_stash_evicts_large_objects_whole_and_frees_their_chunks() -> TestResult {
    let dir = tempfile::tempdir()?;
    let cap = 64u64 << 20;
    let stash = Stash::builder()
        .max_size(cap)
        .eviction_grace(Duration::ZERO)
        .use_resolution(Duration::ZERO)
        .open(dir.path().join("stash.db"))?;
    let objects: Vec<Vec<u8>> = (0..6).map(|i| noise(10 + i, LARGE)).collect();
    let mut keys = Vec::new();
    for object in &objects {
        keys.push(stash.save(object)?);
        stash.flush()?;
    }
    stash.trim_to(cap)?;
    let stats = stash.stats()?;
    assert!(stats.file_bytes <= cap + cap / 2, "{stats}");
    assert!(stats.evicted_objects >= 1, "{stats}");
    // What is left reads whole, what went is gone whole, and the chunks add up.
    for (key, object) in keys.iter().zip(&objects) {
        if let Some(read) = stash.get(key)? {
            assert_eq!(&read, object);
        }
    }
    let report = stash.verify()?;
    assert!(report.is_ok() && report.pending_chunks == 0, "{report}");
    assert!(stats.chunk_bytes <= stats.objects * LARGE as u64 + (1 << 20), "{stats}");
    Ok(())
}

#[test]
fn a_save_whose_source_fails_keeps_nothing() -> TestResult {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("the source broke"));
            }
            let n = buf.len().min(self.0);
            buf[..n].copy_from_slice(&noise(self.0 as u64, n));
            self.0 -= n;
            Ok(n)
        }
    }
    let dir = tempfile::tempdir()?;
    let stash = open(dir.path())?;
    let err = stash.save_reader(Failing(2 * LARGE)).expect_err("the source fails");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    stash.flush()?;
    let stats = stash.stats()?;
    assert_eq!((stats.objects, stats.chunks, stats.chunk_bytes), (0, 0, 0), "{stats}");
    Ok(())
}

const CHILD_ENV: &str = "OBJSTASH_LARGE_CHILD";

/// Saves large objects `start..` (or `start..end`) and appends each acknowledged index to
/// `<db>.acked`; does nothing unless started by a test below.
#[test]
#[ignore = "run as a child process by the large-object tests"]
fn large_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let mut parts = spec.split('|');
    let db = PathBuf::from(parts.next().unwrap_or_default());
    let start: u64 = parts.next().unwrap_or("0").parse()?;
    let end: u64 = parts.next().unwrap_or("18446744073709551615").parse()?;
    let cap: Option<u64> = parts.next().map(str::parse).transpose()?;
    let mut builder = Stash::builder();
    if let Some(cap) = cap {
        builder = builder.max_size(cap).eviction_grace(Duration::ZERO);
    }
    let stash = builder.open(&db)?;
    let mut acked = OpenOptions::new().create(true).append(true).open(sibling(&db, ".acked"))?;
    writeln!(acked, "open")?;
    for i in start..end {
        stash.save_reader(&noise(i, LARGE + i as usize)[..])?;
        writeln!(acked, "{i}")?;
    }
    stash.close()?;
    Ok(())
}

fn acked(db: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(sibling(db, ".acked")).unwrap_or_default();
    text.lines().filter_map(|l| l.parse().ok()).collect()
}

/// Waits until a save of the child is half-way: chunks are committed that no object lists.
fn wait_for_pending_chunks(db: &Path, child: &mut std::process::Child) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited");
        anyhow::ensure!(Instant::now() < deadline, "the child committed no chunk");
        let conn =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let pending: rusqlite::Result<i64> =
            conn.query_row("SELECT count(*) FROM objstash_chunks WHERE refs = 0", [], |r| r.get(0));
        if pending.unwrap_or(0) > 0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_save_killed_half_way_leaves_no_object_and_its_chunks_are_reclaimed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("stash.db");
    let mut start = 0;
    for round in 0..4 {
        let spec = format!("{}|{start}", db.display());
        let mut child = crate::common::spawn_child("large::large_child", CHILD_ENV, spec)?;
        crate::common::wait_until_open(&db, &mut child)?;
        // Half the rounds are killed mid-save (chunks committed, no manifest), the others
        // at a random moment.
        if round % 2 == 0 {
            wait_for_pending_chunks(&db, &mut child)?;
        } else {
            std::thread::sleep(Duration::from_millis(rand_ms(round, 600)));
        }
        child.kill()?;
        child.wait()?;
        drop(child);
        let pending: i64 = rusqlite::Connection::open(&db)?
            .query_row("SELECT count(*) FROM objstash_chunks WHERE refs = 0", [], |r| r.get(0))
            .unwrap_or(0);
        eprintln!("round {round}: killed with {pending} chunks of an unfinished save");
        let stash = Stash::open(&db)?;
        let acked = acked(&db);
        for &i in &acked {
            let key = Key::of(&noise(i, LARGE + i as usize));
            let read = stash.get(&key)?.ok_or_else(|| anyhow::anyhow!("acked {i} is lost"))?;
            assert_eq!(read.len(), LARGE + i as usize);
        }
        let stats = stash.stats()?;
        // The save under way at the kill may have committed before its acknowledgement.
        assert!(
            stats.objects == acked.len() as u64 || stats.objects == acked.len() as u64 + 1,
            "round {round}: {stats}"
        );
        let report = stash.verify()?;
        assert!(report.is_ok(), "round {round}: {report}");
        assert_eq!(report.pending_chunks, 0, "round {round}: the open reclaims every chunk");
        stash.close()?;
        start = 1_000 * (round + 1);
    }
    Ok(())
}

/// A pseudo-random number of milliseconds below `max` for round `round`.
fn rand_ms(round: u64, max: u64) -> u64 {
    (round.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) % max
}

#[test]
fn two_processes_saving_the_same_large_objects_store_each_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("stash.db");
    Stash::open(&db)?.close()?;
    let spawn = || {
        crate::common::spawn_child("large::large_child", CHILD_ENV, format!("{}|0|4", db.display()))
    };
    let children: Vec<Reaped> = vec![spawn()?, spawn()?];
    for child in children {
        let status = child.into_inner().wait()?;
        assert!(status.success(), "a child failed: {status}");
    }
    let stash = Stash::open(&db)?;
    for i in 0..4 {
        let object = noise(i, LARGE + i as usize);
        assert_eq!(stash.get(&Key::of(&object))?.as_deref(), Some(&object[..]), "object {i}");
    }
    let stats = stash.stats()?;
    assert_eq!(stats.objects, 4, "{stats}");
    let report = stash.verify()?;
    assert!(report.is_ok() && report.pending_chunks == 0, "{report}");
    Ok(())
}

#[test]
fn a_capped_stash_killed_while_it_evicts_large_objects_keeps_every_count_right() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("stash.db");
    let cap = 48u64 << 20;
    let mut evicted = 0;
    for round in 0..4u64 {
        let start = 1_000 * round;
        let spec = format!("{}|{start}|{}|{cap}", db.display(), u64::MAX);
        let mut child = crate::common::spawn_child("large::large_child", CHILD_ENV, spec)?;
        crate::common::wait_until_open(&db, &mut child)?;
        // Killed once it has saved past its cap (so it evicts), at a random moment after.
        let deadline = Instant::now() + Duration::from_secs(120);
        while acked(&db).iter().filter(|&&i| i >= start).count() < 3 {
            anyhow::ensure!(child.try_wait()?.is_none(), "the child exited");
            anyhow::ensure!(Instant::now() < deadline, "the child saved too little");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rand_ms(round + 7, 500)));
        child.kill()?;
        child.wait()?;
        drop(child);
        let stash = Stash::open(&db)?;
        for i in acked(&db) {
            let object = noise(i, LARGE + i as usize);
            // Evicted or whole: never a part of it.
            if let Some(read) = stash.get(&Key::of(&object))? {
                assert!(read == object, "round {round}: object {i} reads other bytes");
            }
        }
        let report = stash.verify()?;
        assert!(report.is_ok() && report.pending_chunks == 0, "round {round}: {report}");
        let stats = stash.stats()?;
        evicted = stats.evicted_objects;
        stash.close()?;
    }
    assert!(evicted > 0, "the cap evicted nothing");
    Ok(())
}

#[test]
fn a_pinned_large_object_stays_under_a_cap_and_its_chunks_with_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder()
        .max_size(40 << 20)
        .eviction_grace(Duration::ZERO)
        .use_resolution(Duration::ZERO)
        .open(dir.path().join("stash.db"))?;
    let pinned = noise(30, LARGE);
    let key = stash.save(&pinned)?;
    assert_eq!(stash.pin(&[key])?, vec![true]);
    for i in 0..4 {
        stash.save(&noise(31 + i, LARGE))?;
        stash.flush()?;
    }
    stash.trim_to(40 << 20)?;
    assert_eq!(stash.get(&key)?.as_deref(), Some(&pinned[..]), "the pinned object stays whole");
    let stats = stash.stats()?;
    assert!(stats.evicted_objects >= 2, "{stats}");
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn a_missing_chunk_is_named_by_verify_and_repair_drops_only_its_object() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("stash.db");
    let (broken, whole, small) = (noise(40, LARGE), noise(41, LARGE), b"a small one".to_vec());
    let (broken_key, whole_key, small_key) = {
        let stash = Stash::open(&db)?;
        let keys = (stash.save(&broken)?, stash.save(&whole)?, stash.save(&small)?);
        stash.close()?;
        keys
    };
    {
        let conn = rusqlite::Connection::open(&db)?;
        let at = LARGE / 3;
        let gone = conn.execute(
            "DELETE FROM objstash_chunks WHERE instr(data, ?1) > 0",
            [&broken[at..at + 64]],
        )?;
        assert_eq!(gone, 1);
    }
    let stash = Stash::open(&db)?;
    let report = stash.verify()?;
    assert_eq!(report.corrupt, vec![broken_key], "{report}");
    assert!(report.problems.iter().any(|p| p.contains("chunks")), "{report}");
    assert!(matches!(stash.get(&broken_key), Err(Error::Corrupt { .. })));
    stash.close()?;
    let repaired = objstash::repair(&db)?;
    assert_eq!(repaired.recovered, 2, "{repaired}");
    let stash = Stash::open(&db)?;
    assert!(stash.get(&broken_key)?.is_none());
    assert_eq!(stash.get(&whole_key)?.as_deref(), Some(&whole[..]));
    assert_eq!(stash.get(&small_key)?.as_deref(), Some(&small[..]));
    let report = stash.verify()?;
    assert!(report.is_ok() && report.pending_chunks == 0, "{report}");
    Ok(())
}
