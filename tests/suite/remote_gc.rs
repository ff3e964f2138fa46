//! Garbage collection of the remote against a real S3-compatible server (SeaweedFS,
//! started by each test): duplicate packs of concurrent pushes taken out and deleted in two
//! phases, orphan bodies of killed pushes and quarantined packs collected, the lease, a
//! collection beside pushing and reading processes, and collectors killed with SIGKILL.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::aws::AmazonS3;
use object_store::path::Path as StorePath;

use crate::common::TestResult;
use crate::common::s3::S3Server;
use crate::remote::{
    ReadingMachine, child_spec, finish_pushes, flip_middle_byte, list, open, small_packs,
    start_pushes,
};
use objstash::{CollectOptions, CollectReport, Error, Key, RemoteConfig, Stash};

/// A machine that collects: no clock margin, so that a grace period of zero is zero.
fn collector(dir: &Path, name: &str, remote: RemoteConfig) -> objstash::Result<Stash> {
    open(dir, name, remote.clock_skew(Duration::ZERO))
}

/// Collect now: no grace periods.
fn at_once() -> CollectOptions {
    CollectOptions::default().grace(Duration::ZERO).orphan_grace(Duration::ZERO)
}

/// Names (whole paths) of the remote's files under `prefix/folder`.
fn files(
    rt: &tokio::runtime::Runtime,
    store: &AmazonS3,
    prefix: &str,
    folder: &str,
) -> Vec<String> {
    rt.block_on(list(store, &format!("{prefix}/{folder}"))).expect("listing the test bucket")
}

/// Pushes `objects` from stash `a`, then the same objects in the opposite order from stash
/// `b` as a push running at the same moment would: without seeing `a`'s packs (their log
/// events are hidden while `b` lists the log). `b`'s packs then hold only what earlier
/// packs hold. Returns the index files of `a`'s packs and how many `b` pushed; `reader`, if
/// given, refreshes while only `b`'s packs are listed, so its copy of the indexes locates
/// every object in them.
fn push_twice(
    server: &S3Server,
    dir: &Path,
    prefix: &str,
    objects: &[Vec<u8>],
    reader: Option<&Stash>,
) -> anyhow::Result<(Vec<String>, u64)> {
    let reversed: Vec<Vec<u8>> = objects.iter().rev().cloned().collect();
    let (indexes_a, pushed_b) = push_unaware(
        server,
        prefix,
        open(dir, "a.db", small_packs(server.remote(prefix)))?,
        |a| a.save_all(objects).map(drop),
        open(dir, "b.db", small_packs(server.remote(prefix)))?,
        |b| b.save_all(&reversed).map(drop),
        reader,
    )?;
    assert_eq!(pushed_b.objects, objects.len() as u64, "{pushed_b}");
    Ok((indexes_a, pushed_b.packs))
}

/// `a` saves (`fill_a`) and pushes; `b` saves (`fill_b`) and pushes without seeing `a`'s
/// packs (their events hidden meanwhile); `reader`, if given, refreshes then. Returns the
/// index files of `a`'s packs and `b`'s push.
fn push_unaware(
    server: &S3Server,
    prefix: &str,
    a: Stash,
    fill_a: impl FnOnce(&Stash) -> objstash::Result<()>,
    b: Stash,
    fill_b: impl FnOnce(&Stash) -> objstash::Result<()>,
    reader: Option<&Stash>,
) -> anyhow::Result<(Vec<String>, objstash::PushReport)> {
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    fill_a(&a)?;
    let pushed_a = a.remote().expect("a remote").push()?;
    a.close()?;
    let indexes_a = files(&rt, &store, prefix, "indexes");
    let events = files(&rt, &store, prefix, "log");
    assert_eq!(events.len() as u64, pushed_a.packs);
    rt.block_on(async {
        for e in &events {
            store.delete(&StorePath::from(e.as_str())).await?;
        }
        anyhow::Ok(())
    })?;
    fill_b(&b)?;
    let pushed_b = b.remote().expect("a remote").push()?;
    b.close()?;
    if let Some(reader) = reader {
        reader.remote().expect("a remote").refresh()?;
    }
    rt.block_on(async {
        for e in &events {
            store.put(&StorePath::from(e.as_str()), Bytes::new().into()).await?;
        }
        anyhow::Ok(())
    })?;
    Ok((indexes_a, pushed_b))
}

#[test]
fn a_large_object_is_read_through_after_packs_of_its_chunks_are_collected() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let large = crate::common::noise(6, 20 << 20);
    // The same large object pushed by two machines in packs of different sizes: the second
    // machine's packs of chunks are all duplicates.
    let (indexes_a, pushed_b) = push_unaware(
        &server,
        "big",
        open(dir.path(), "a.db", server.remote("big").pack_size(4 << 20))?,
        |a| a.save_reader(&large[..]).map(drop),
        open(dir.path(), "b.db", server.remote("big").pack_size(3 << 20).uploads(1))?,
        |b| b.save_reader(&large[..]).map(drop),
        None,
    )?;
    assert!(pushed_b.packs > 2, "{pushed_b}");
    // A reader that finds the manifest in the first machine's packs and the chunks in the
    // second's: it learns the second's packs of chunks first (the first's events hidden,
    // and the second's last pack, its manifest's, never announced), then the first's.
    let is_a = |event: &String| {
        indexes_a.iter().any(|i| event.contains(i.rsplit('/').next().unwrap_or(i)))
    };
    let events = files(&rt, &store, "big", "log");
    let (events_a, events_b): (Vec<String>, Vec<String>) = events.into_iter().partition(is_a);
    let manifest_b = events_b.last().expect("b's events").clone();
    rt.block_on(async {
        store.delete(&StorePath::from(manifest_b.as_str())).await?;
        for e in &events_a {
            store.delete(&StorePath::from(e.as_str())).await?;
        }
        anyhow::Ok(())
    })?;
    let reader = open(dir.path(), "reader.db", server.remote("big"))?;
    reader.remote().expect("a remote").refresh()?;
    rt.block_on(async {
        for e in &events_a {
            store.put(&StorePath::from(e.as_str()), Bytes::new().into()).await?;
        }
        anyhow::Ok(())
    })?;
    reader.remote().expect("a remote").refresh()?;
    // The second machine's packs go: taken out and, with no grace period, deleted at once
    // (its unannounced manifest pack as an orphan).
    let c = collector(dir.path(), "c.db", server.remote("big"))?;
    let collected = c.remote().expect("a remote").collect(&at_once())?;
    let chunk_packs = pushed_b.packs - 1;
    assert_eq!(
        (collected.duplicates, collected.deleted, collected.orphans),
        (chunk_packs, chunk_packs, 1)
    );
    let key = Key::of(&large);
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut reader.open_reader(&key)?.expect("read through"), &mut read)?;
    assert!(read == large, "the object read through differs");
    Ok(())
}

#[test]
fn duplicate_packs_leave_the_listing_first_and_their_bodies_go_after_the_grace_period() -> TestResult
{
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let objects = crate::common::objects(11, 3_000);
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    // A machine whose copy of the indexes locates every object in the packs that will go.
    let stale = open(dir.path(), "stale.db", server.remote("dup"))?;
    let (indexes_a, packs_b) = push_twice(&server, dir.path(), "dup", &objects, Some(&stale))?;
    let packs_a = indexes_a.len() as u64;
    assert!(packs_a >= 10 && packs_b >= 10, "{packs_a} {packs_b}");
    assert_eq!(files(&rt, &store, "dup", "packs").len() as u64, packs_a + packs_b);

    // Phase one: out of the listing, bodies kept for the grace period (an hour).
    let c = collector(dir.path(), "c.db", server.remote("dup"))?;
    let first = c.remote().expect("a remote").collect(&CollectOptions::default())?;
    assert_eq!((first.duplicates, first.deleted, first.waiting), (packs_b, 0, packs_b), "{first}");
    // The earlier push's packs stay: they are first in the order every collector uses.
    assert_eq!(files(&rt, &store, "dup", "indexes"), indexes_a);
    assert_eq!(files(&rt, &store, "dup", "packs").len() as u64, packs_a + packs_b);
    let fresh = open(dir.path(), "fresh.db", server.remote("dup"))?;
    let status = fresh.remote().expect("a remote").refresh()?;
    assert_eq!((status.packs, status.objects), (packs_a, 3_000), "{status}");
    // A machine that has not refreshed since reads from the bodies still there.
    assert_eq!(stale.get(&keys[5])?.as_deref(), Some(&objects[5][..]));

    // Phase two: the grace period over, the bodies go.
    let second = c.remote().expect("a remote").collect(&at_once())?;
    assert_eq!((second.duplicates, second.deleted, second.waiting), (0, packs_b, 0), "{second}");
    assert!(second.bytes_freed > 0);
    assert_eq!(files(&rt, &store, "dup", "packs").len() as u64, packs_a);
    // The stale machine asks for bodies that are gone: it refreshes and reads every object
    // where the remote still holds it; nothing is taken for damage.
    let got = stale.get_many(&keys)?;
    for (i, value) in got.iter().enumerate() {
        assert_eq!(value.as_deref(), Some(&objects[i][..]), "object {i}");
    }
    assert!(files(&rt, &store, "dup", "damaged").is_empty());
    let got = fresh.get_many(&keys)?;
    assert!(got.iter().zip(&objects).all(|(g, o)| g.as_deref() == Some(&o[..])));

    // Nothing left to do, and the remote records the last collection.
    let third = c.remote().expect("a remote").collect(&at_once())?;
    let mut nothing = CollectReport::default();
    nothing.requests = third.requests;
    assert_eq!(third, nothing, "{third}");
    let last = fresh.remote().expect("a remote").last_collection()?.expect("a record");
    assert_eq!(last.report, third);
    Ok(())
}

#[test]
fn orphan_bodies_and_quarantined_packs_are_collected_and_a_push_heals() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let objects = crate::common::objects(12, 2_000);
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    let a = open(dir.path(), "a.db", small_packs(server.remote("orphans")))?;
    a.save_all(&objects)?;
    let pushed = a.remote().expect("a remote").push()?;
    // What a push killed between a body and its index leaves.
    let orphan = format!("orphans/packs/{}", "ab".repeat(32));
    rt.block_on(store.put(&StorePath::from(orphan.as_str()), Bytes::from(vec![7; 5_000]).into()))?;
    // A damaged pack, found by a reader and quarantined.
    let bodies = files(&rt, &store, "orphans", "packs");
    let damaged = bodies.iter().find(|b| **b != orphan).expect("a pack").clone();
    rt.block_on(flip_middle_byte(&store, &damaged))?;
    let reader = open(dir.path(), "reader.db", server.remote("orphans"))?;
    let pulled = reader.remote().expect("a remote").pull()?;
    assert_eq!(pulled.damaged.len(), 1, "{pulled}");
    assert_eq!(files(&rt, &store, "orphans", "damaged").len(), 1);

    // With the default grace periods, nothing young is deleted.
    let c = collector(dir.path(), "c.db", server.remote("orphans"))?;
    let kept = c.remote().expect("a remote").collect(&CollectOptions::default())?;
    assert_eq!((kept.orphans, kept.deleted, kept.waiting), (0, 0, 1), "{kept}");
    assert_eq!(files(&rt, &store, "orphans", "packs").len() as u64, pushed.packs + 1);
    // Once they are over, the orphan, the damaged body and its record go.
    let swept = c.remote().expect("a remote").collect(&at_once())?;
    assert_eq!((swept.orphans, swept.deleted, swept.duplicates), (1, 1, 0), "{swept}");
    assert_eq!(files(&rt, &store, "orphans", "packs").len() as u64, pushed.packs - 1);
    assert!(files(&rt, &store, "orphans", "damaged").is_empty());

    // The machine that holds the objects pushes them again: the remote is whole.
    let healed = a.remote().expect("a remote").push()?;
    assert!(healed.objects > 0 && healed.packs >= 1, "{healed}");
    let b = open(dir.path(), "b.db", server.remote("orphans"))?;
    let pulled = b.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete(), "{pulled}");
    assert_eq!(pulled.objects, 2_000, "{pulled}");
    assert!(b.missing(&keys)?.is_empty());
    Ok(())
}

/// Duplicates under `prefix` (as `push_twice`) and a collecting machine that reaches the
/// server through a proxy that fails the reads it is told to: the server, its directory,
/// the proxy, the collector, the packs listed and the duplicates among them.
struct BehindAProxy {
    // Dropped in this order: the stash, then the server, then the directory.
    collector: Stash,
    proxy: crate::common::faulty::FaultyProxy,
    _server: S3Server,
    _dir: tempfile::TempDir,
    packs: u64,
    duplicates: u64,
}

fn duplicates_behind_a_proxy(prefix: &str) -> anyhow::Result<BehindAProxy> {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let objects = crate::common::objects(11, 3_000);
    let (indexes_a, duplicates) = push_twice(&server, dir.path(), prefix, &objects, None)?;
    let packs = files(&rt, &server.store(), prefix, "packs").len() as u64;
    assert_eq!(packs, indexes_a.len() as u64 + duplicates);
    let proxy = crate::common::faulty::FaultyProxy::start(&server.endpoint());
    let through = crate::common::s3::remote_at(&proxy.endpoint(), prefix);
    let collector = collector(dir.path(), "c.db", through)?;
    Ok(BehindAProxy { collector, proxy, _server: server, _dir: dir, packs, duplicates })
}

#[test]
fn a_collection_that_cannot_read_the_indexes_leaves_their_packs_and_says_so() -> TestResult {
    let t = duplicates_behind_a_proxy("unread")?;
    let c = t.collector.remote().expect("a remote");
    // Every read of an index fails, as on a server whose volume holding them is down.
    t.proxy.fail_reads_of("/unread/indexes/");
    let first = c.collect(&at_once())?;
    assert!(t.proxy.failed() > 0);
    assert!(!first.is_complete() && first.left_unread == t.packs, "{first}");
    assert!(first.to_string().contains("collect again"), "{first}");
    assert_eq!(first.duplicates, 0, "{first}");
    let recorded = c.last_collection()?.expect("a record");
    assert_eq!(recorded.report.left_unread, first.left_unread);
    // The server back, the next collection reads them and finishes the job.
    t.proxy.heal();
    let second = c.collect(&at_once())?;
    assert!(second.is_complete(), "{second}");
    assert_eq!(second.duplicates, t.duplicates, "{second}");
    Ok(())
}

#[test]
fn a_collection_reads_again_the_indexes_the_server_failed_for() -> TestResult {
    let t = duplicates_behind_a_proxy("again")?;
    // Every index fails at its first reads (each read is tried twice), then the server is
    // back: a collection refreshes again and finishes the job in one run.
    t.proxy.fail_next_reads_of("/again/indexes/", 2 * t.packs);
    let collected = t.collector.remote().expect("a remote").collect(&at_once())?;
    assert!(t.proxy.failed() >= t.packs, "{} reads failed", t.proxy.failed());
    assert!(collected.is_complete(), "{collected}");
    assert_eq!(collected.duplicates, t.duplicates, "{collected}");
    Ok(())
}

#[test]
fn one_collector_at_a_time_and_a_lease_that_ran_out_is_taken_over() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let lease = StorePath::from("lease/control/lease");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
    let held = format!("holder elsewhere:1:1\nexpires {}\n", now_ms + 3_600_000);
    rt.block_on(store.put(&lease, Bytes::from(held).into()))?;
    let c = collector(dir.path(), "c.db", server.remote("lease"))?;
    match c.remote().expect("a remote").collect(&at_once()) {
        Err(e @ Error::Remote { .. }) => {
            assert!(e.to_string().contains("elsewhere:1:1 holds it"), "{e}");
        }
        other => panic!("a held lease was not respected: {other:?}"),
    }
    assert_eq!(c.remote().expect("a remote").last_collection()?, None);
    // The holder was killed: its lease runs out, and the next collector takes it over.
    rt.block_on(store.put(&lease, Bytes::from("holder elsewhere:1:1\nexpires 1\n").into()))?;
    c.remote().expect("a remote").collect(&at_once())?;
    let after = rt.block_on(async { store.get(&lease).await?.bytes().await })?;
    let after = String::from_utf8_lossy(&after);
    assert!(after.contains("expires 0") && !after.contains("elsewhere"), "{after}");
    assert!(c.remote().expect("a remote").last_collection()?.is_some());
    Ok(())
}

#[test]
fn a_collection_beside_two_pushing_processes_and_a_reader_loses_nothing() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let objects = Arc::new(crate::common::objects(21, 12_000));
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    // Two machines hold the same model, saved in opposite orders: their pushes make
    // different packs of the same objects.
    for (name, order) in [("a.db", false), ("b.db", true)] {
        let stash = Stash::open(dir.path().join(name))?;
        if order {
            stash.save_all(&objects.iter().rev().cloned().collect::<Vec<_>>())?;
        } else {
            stash.save_all(&objects)?;
        }
        stash.close()?;
    }
    let dbs = ["a.db", "b.db"].map(|name| dir.path().join(name));
    let mut children = start_pushes(&server, &dbs, "busy")?;
    // A third machine reads through all along: every object it gets is right, and it never
    // gets an error.
    let reader = ReadingMachine::start(
        &dir.path().join("reader.db"),
        server.remote("busy"),
        objects.clone(),
    )?;
    // Collections run as fast as they can until both pushes are over: duplicates go out of
    // the listing and their bodies at once (no grace period); bodies of pushes in flight
    // are not orphans (a day's grace).
    let c = collector(dir.path(), "c.db", server.remote("busy"))?;
    let options = CollectOptions::default().grace(Duration::ZERO);
    let mut rounds = 0;
    let mut taken_out = 0;
    while children.iter_mut().any(|c| c.try_wait().ok().flatten().is_none()) {
        taken_out += c.remote().expect("a remote").collect(&options)?.duplicates;
        rounds += 1;
    }
    finish_pushes(children)?;
    taken_out += c.remote().expect("a remote").collect(&options)?.duplicates;
    let last = c.remote().expect("a remote").collect(&options)?;
    // The reader goes on until it has served objects from the collected remote.
    let served = reader.stop_after(500)?;
    eprintln!(
        "{rounds} collections during the pushes took out {taken_out} duplicate packs; the \
         reader served {served} objects; last: {last}"
    );
    // Every object pushed is on the remote and right; nothing was taken for damage.
    let fresh = open(dir.path(), "fresh.db", server.remote("busy"))?;
    let got = fresh.get_many(&keys)?;
    for (i, value) in got.iter().enumerate() {
        assert_eq!(value.as_deref(), Some(&objects[i][..]), "object {i}");
    }
    let rt = tokio::runtime::Runtime::new()?;
    assert!(files(&rt, &server.store(), "busy", "damaged").is_empty());
    Ok(())
}

/// Environment variable that makes `collect_child` collect: `<db>|<endpoint>|<prefix>`.
const COLLECT_CHILD: &str = "OBJSTASH_TEST_COLLECT_CHILD";

/// Collects in a child process, to be killed mid-collection by
/// `collectors_killed_at_random_moments_leave_every_listed_pack_whole`. A lease left by a
/// killed collector keeps it waiting until the lease runs out (2 s).
#[test]
#[ignore = "child process of a kill test"]
fn collect_child() -> TestResult {
    let Some((db, endpoint, prefix)) = child_spec(COLLECT_CHILD) else { return Ok(()) };
    let remote = crate::common::s3::remote_at(&endpoint, &prefix).clock_skew(Duration::ZERO);
    let stash = Stash::builder().remote(remote).open(&db)?;
    std::fs::write(crate::common::sibling(Path::new(&db), ".acked"), "open")?;
    let options = at_once().lease(Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match stash.remote().expect("a remote").collect(&options) {
            Err(e) if e.to_string().contains("holds it") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other.map(drop).map_err(Into::into),
        }
    }
}

#[test]
fn collectors_killed_at_random_moments_leave_every_listed_pack_whole() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let objects = crate::common::objects(31, 6_000);
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    let (indexes_a, packs_b) = push_twice(&server, dir.path(), "kill", &objects, None)?;
    let packs_a = indexes_a.len() as u64;
    for i in 0..20u8 {
        let orphan = format!("kill/packs/{}", format!("{i:02x}").repeat(32));
        rt.block_on(
            store.put(&StorePath::from(orphan.as_str()), Bytes::from(vec![i; 100]).into()),
        )?;
    }
    // Progress of a collection, as the remote shows it: packs taken out, bodies deleted.
    let progress = || {
        let gone =
            files(&rt, &store, "kill", "log").iter().filter(|e| e.ends_with(".gone")).count();
        let bodies = files(&rt, &store, "kill", "packs").len();
        gone + (packs_a + packs_b + 20) as usize - bodies
    };
    let db = dir.path().join("collector.db");
    let spec = format!("{}|{}|kill", db.display(), server.endpoint());
    let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(std::process::id());
    let mut killed_mid_job = 0;
    for round in 0..10 {
        let _ = std::fs::remove_file(crate::common::sibling(&db, ".acked"));
        let mut child =
            crate::common::spawn_child("remote_gc::collect_child", COLLECT_CHILD, spec.clone())?;
        crate::common::wait_until_open(&db, &mut child)?;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Killed once this collection has taken out or deleted 1 to 6 more packs.
        let goal = progress() + 1 + (seed % 6) as usize;
        let deadline = Instant::now() + Duration::from_secs(120);
        let reached = loop {
            if progress() >= goal {
                break true;
            }
            if child.try_wait()?.is_some() {
                break false;
            }
            anyhow::ensure!(Instant::now() < deadline, "round {round}: no progress");
            std::thread::sleep(Duration::from_millis(5));
        };
        child.kill()?; // SIGKILL
        child.wait()?;
        killed_mid_job += usize::from(reached);
        // Every pack still listed is whole and every object is on the remote.
        let fresh = open(dir.path(), &format!("fresh{round}.db"), server.remote("kill"))?;
        let pulled = fresh.remote().expect("a remote").pull()?;
        assert!(pulled.is_complete() && pulled.damaged.is_empty(), "round {round}: {pulled}");
        assert!(fresh.missing(&keys)?.is_empty(), "round {round}: {pulled}");
        assert!(fresh.verify()?.is_ok());
        fresh.close()?;
        if !reached {
            break;
        }
    }
    // The next collection finishes the job: only the first push's packs are left.
    let c = collector(dir.path(), "c.db", server.remote("kill"))?;
    let options = at_once().lease(Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(120);
    let finish = loop {
        match c.remote().expect("a remote").collect(&options) {
            Err(e) if e.to_string().contains("holds it") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => break other?,
        }
    };
    eprintln!("{killed_mid_job} collectors killed mid-job; the last collection: {finish}");
    let done = c.remote().expect("a remote").collect(&options)?;
    assert_eq!((done.duplicates, done.deleted, done.orphans), (0, 0, 0), "{done}");
    assert_eq!(files(&rt, &store, "kill", "packs").len() as u64, packs_a);
    assert_eq!(files(&rt, &store, "kill", "indexes"), indexes_a);
    let fresh = open(dir.path(), "last.db", server.remote("kill"))?;
    let got = fresh.get_many(&keys)?;
    assert!(got.iter().zip(&objects).all(|(g, o)| g.as_deref() == Some(&o[..])));
    assert!(killed_mid_job >= 5, "only {killed_mid_job} kills landed mid-collection");
    Ok(())
}

/// A pull counted pack entries as objects ("pulled 109,870 objects" for 99,922 distinct
/// keys): keys that concurrent pushes left in two packs each were fetched and counted
/// twice. Each is fetched and counted once.
#[test]
fn a_pull_fetches_and_counts_a_key_in_two_packs_once() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let objects = crate::common::objects(12, 1_000);
    let (indexes_a, packs_b) = push_twice(&server, dir.path(), "twice", &objects, None)?;
    assert!(!indexes_a.is_empty() && packs_b > 0);
    let fresh = open(dir.path(), "fresh.db", server.remote("twice"))?;
    let pulled = fresh.remote().expect("a remote").pull()?;
    assert_eq!((pulled.objects, pulled.already_local), (1_000, 0), "{pulled}");
    assert_eq!(fresh.len()?, 1_000);
    assert!(fresh.verify()?.is_ok());
    Ok(())
}

/// Each command-line `get` that read through put a use report of its own (40 reads, 40
/// PUTs, files piling up on the remote). A handle that closes with uses not yet due parks
/// them beside the stash; one report carries every parked use when one is due (here, the
/// next push's).
#[test]
fn short_lived_handles_park_their_uses_and_one_report_carries_them() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let objects = crate::common::objects(13, 10);
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    let source = open(dir.path(), "source.db", server.remote("park"))?;
    source.save_all(&objects)?;
    source.remote().expect("a remote").push()?;
    source.close()?;
    let reports = || files(&rt, &store, "park", "uses").len();
    let before = reports();
    // Ten short-lived handles on one machine, one read through the remote each.
    for key in &keys {
        let reader = open(dir.path(), "reader.db", server.remote("park"))?;
        assert!(reader.get(key)?.is_some());
        reader.close()?;
    }
    assert_eq!(reports(), before, "no report per process");
    assert!(dir.path().join("reader.db-remote-uses").exists(), "the uses are parked");
    // The next report carries them all, in one file.
    let reader = open(dir.path(), "reader.db", server.remote("park"))?;
    reader.remote().expect("a remote").push()?;
    reader.close()?;
    let after = files(&rt, &store, "park", "uses");
    assert_eq!(after.len(), before + 1, "{after:?}");
    Ok(())
}

/// A killed collector's lease kept every other collector out for twenty minutes while the
/// message said "0 s more", and nothing said how to clear it. The message says how long
/// (its lease and the clock margin) and how; `break_lease` clears a gone holder's lease.
#[test]
fn a_dead_collectors_lease_is_named_and_cleared() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    // The lease of a collector killed a moment ago: ten minutes to run.
    let expires =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() + 600_000;
    let lease = format!("holder dead-host:4242:0badf00d\nexpires {expires}\n");
    rt.block_on(
        store.put(&StorePath::from("lease-test/control/lease"), Bytes::from(lease).into()),
    )?;
    let c = collector(dir.path(), "c.db", server.remote("lease-test"))?;
    let refused = c.remote().expect("a remote").collect(&CollectOptions::default());
    let message = format!("{:?}", refused.expect_err("the lease is held"));
    assert!(
        message.contains("dead-host:4242:0badf00d") && message.contains("break-lease"),
        "{message}"
    );
    assert!(message.contains("clock margin"), "{message}");
    let cleared = c.remote().expect("a remote").break_lease()?;
    assert_eq!(cleared.as_deref(), Some("dead-host:4242:0badf00d"));
    assert_eq!(c.remote().expect("a remote").break_lease()?, None, "nobody holds it now");
    c.remote().expect("a remote").collect(&CollectOptions::default())?;
    Ok(())
}
