//! Trimming the remote against a real S3-compatible server (SeaweedFS, started by each
//! test): by age, with mostly unused packs repacked; by size, least recently used first;
//! a push that relied on a pack a trim took out; trims and collections beside pushing
//! processes and a reader.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::TestResult;
use crate::common::s3::S3Server;
use crate::remote::{ReadingMachine, finish_pushes, open, small_packs, start_pushes};
use objstash::{CollectOptions, Key, RemoteConfig, Stash, TrimOptions};

/// A machine that trims: no clock margin, so that a grace period of zero is zero.
fn trimmer(dir: &Path, name: &str, remote: RemoteConfig) -> objstash::Result<Stash> {
    open(dir, name, remote.clock_skew(Duration::ZERO))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

/// A moment after everything done so far and before everything done next: waits for the
/// clock to pass it.
fn moment() -> u64 {
    let at = now_ms();
    while now_ms() <= at {
        std::thread::yield_now();
    }
    at + 1
}

/// A trim that drops what was not used since `cut` (ms), with no grace period.
fn unused_since(cut: u64) -> TrimOptions {
    TrimOptions::default()
        .unused_since(UNIX_EPOCH + Duration::from_millis(cut))
        .grace(Duration::ZERO)
}

fn keys_of(objects: &[Vec<u8>]) -> Vec<Key> {
    objects.iter().map(|o| Key::of(o)).collect()
}

/// Every file under `prefix` of the test bucket, with its bytes.
fn bucket_files(server: &S3Server, prefix: &str) -> anyhow::Result<Vec<(String, u64)>> {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let store = server.store();
    let metas: Vec<_> = rt.block_on(
        store.list(Some(&object_store::path::Path::from(prefix))).try_collect::<Vec<_>>(),
    )?;
    Ok(metas.into_iter().map(|m| (m.location.to_string(), m.size)).collect())
}

/// Bytes of every file under `prefix` of the test bucket.
fn bucket_bytes(server: &S3Server, prefix: &str) -> anyhow::Result<u64> {
    Ok(bucket_files(server, prefix)?.iter().map(|(_, size)| size).sum())
}

/// Asserts that a machine reading the remote anew finds every one of `present` with its
/// bytes and none of `absent`.
fn assert_remote_holds(
    stash: &Stash,
    present: &[Vec<u8>],
    absent: &[Vec<u8>],
    what: &str,
) -> TestResult {
    let remote = stash.remote().expect("a remote");
    remote.refresh()?;
    let got = stash.get_many(&keys_of(present))?;
    for (i, value) in got.iter().enumerate() {
        anyhow::ensure!(
            value.as_deref() == Some(&present[i][..]),
            "{what}: object {i} of the kept"
        );
    }
    let absent = keys_of(absent);
    let missing = remote.missing(&absent)?;
    anyhow::ensure!(
        missing.len() == absent.len(),
        "{what}: {} of {} still there",
        absent.len() - missing.len(),
        absent.len()
    );
    Ok(())
}

#[test]
fn packs_unused_for_the_age_go_and_mostly_unused_packs_are_repacked() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let x = crate::common::objects(41, 1_500);
    let y = crate::common::objects(42, 1_500);
    let z = crate::common::objects(43, 1_800);
    // Z interleaved: every fifth object is used later, the others not. Which objects
    // share a pack follows the order the writer committed them in, which the parallel
    // compressors vary: at a fifth, no pack's objects in use come near the half of its
    // bytes that would keep it whole (at a third, about one pack in five hundred did).
    let (z_used, z_unused): (Vec<_>, Vec<_>) =
        z.iter().cloned().enumerate().partition(|(i, _)| i % 5 == 0);
    let z_used: Vec<Vec<u8>> = z_used.into_iter().map(|(_, o)| o).collect();
    let z_unused: Vec<Vec<u8>> = z_unused.into_iter().map(|(_, o)| o).collect();
    let a = open(dir.path(), "a.db", small_packs(server.remote("age")))?;
    // One push per model: no pack holds two models.
    for model in [&x, &y, &z] {
        a.save_all(model)?;
        a.remote().expect("a remote").push()?;
    }
    a.close()?;
    let cut = moment();
    // Another machine reads Y and a third of Z through; its uses go up as it closes.
    let reader = open(dir.path(), "reader.db", server.remote("age"))?;
    let wanted: Vec<Key> = keys_of(&y).into_iter().chain(keys_of(&z_used)).collect();
    assert!(reader.get_many(&wanted)?.iter().all(Option::is_some));
    // Its uses go up now, not within the ten minutes a closing handle parks them.
    if let Some(remote) = reader.remote() {
        remote.report_uses()?;
    }
    reader.close()?;

    let before_trim = moment();
    let t = trimmer(dir.path(), "t.db", server.remote("age"))?;
    let trimmed = t.remote().expect("a remote").trim(&unused_since(cut))?;
    eprintln!("{trimmed}");
    assert!(trimmed.unused >= 1 && trimmed.repacked >= 1, "{trimmed}");
    assert_eq!(trimmed.objects_moved, z_used.len() as u64, "{trimmed}");
    assert!(trimmed.size_after < trimmed.size_before / 2, "{trimmed}");
    assert_eq!(trimmed.swept.deleted, trimmed.unused + trimmed.repacked, "{trimmed}");
    let fresh = open(dir.path(), "fresh.db", server.remote("age"))?;
    let kept: Vec<Vec<u8>> = y.iter().chain(&z_used).cloned().collect();
    let gone: Vec<Vec<u8>> = x.iter().chain(&z_unused).cloned().collect();
    assert_remote_holds(&fresh, &kept, &gone, "after the trim")?;
    // The size counts the packs' bodies and more (indexes, the log, use reports).
    let status = fresh.remote().expect("a remote").refresh()?;
    assert!(status.bytes > 0 && status.bytes < trimmed.size_after, "{status}: {trimmed}");

    // The moved objects kept their last use: the same trim again finds nothing to do.
    let again = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert_eq!((again.unused, again.repacked, again.over_size), (0, 0, 0), "{again}");
    // And a trim that keeps only what was used after the first trim began empties the
    // remote: moving objects into new packs is not a use.
    let all = t.remote().expect("a remote").trim(&unused_since(before_trim))?;
    assert!(all.unused > 0, "{all}");
    let emptied = open(dir.path(), "emptied.db", server.remote("age"))?;
    assert_eq!(emptied.remote().expect("a remote").refresh()?.objects, 0, "{all}");
    assert!(t.remote().expect("a remote").last_trim()?.is_some());
    Ok(())
}

#[test]
fn a_trim_that_cannot_read_what_it_would_repack_leaves_it_and_says_so() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let x = crate::common::objects(71, 1_200);
    let z = crate::common::objects(73, 1_200);
    // A fifth in use: every pack of Z is one the trim would repack (see above).
    let z_used: Vec<Vec<u8>> = z.iter().step_by(5).cloned().collect();
    let a = open(dir.path(), "a.db", small_packs(server.remote("unread")))?;
    a.save_all(&x)?;
    a.remote().expect("a remote").push()?;
    let x_bodies = rt.block_on(crate::remote::list(&store, "unread/packs"))?;
    a.save_all(&z)?;
    a.remote().expect("a remote").push()?;
    a.close()?;
    let cut = moment();
    let reader = open(dir.path(), "reader.db", server.remote("unread"))?;
    assert!(reader.get_many(&keys_of(&z_used))?.iter().all(Option::is_some));
    // Its uses go up now, not within the ten minutes a closing handle parks them.
    if let Some(remote) = reader.remote() {
        remote.report_uses()?;
    }
    reader.close()?;
    // One of Z's packs, which the trim would repack, cannot be read (its body lost).
    let z_bodies: Vec<String> = rt
        .block_on(crate::remote::list(&store, "unread/packs"))?
        .into_iter()
        .filter(|b| !x_bodies.contains(b))
        .collect();
    rt.block_on(async {
        use object_store::ObjectStore;
        store.delete(&object_store::path::Path::from(z_bodies[0].as_str())).await
    })?;

    let t = trimmer(dir.path(), "t.db", server.remote("unread"))?;
    let trimmed = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert!(!trimmed.is_complete() && trimmed.left_unread >= 1, "{trimmed}");
    assert!(trimmed.to_string().contains("trim again"), "{trimmed}");
    assert!(trimmed.unused >= 1, "{trimmed}");
    // Z's packs left unread are all still listed: nothing of them went.
    let fresh = open(dir.path(), "fresh.db", server.remote("unread"))?;
    fresh.remote().expect("a remote").refresh()?;
    assert!(fresh.remote().expect("a remote").missing(&keys_of(&z))?.is_empty());
    assert_eq!(fresh.remote().expect("a remote").missing(&keys_of(&x))?.len(), x.len());
    Ok(())
}

#[test]
fn uses_of_packs_a_trim_could_not_read_survive_its_merge_of_the_reports() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let x = crate::common::objects(75, 300);
    let a = open(dir.path(), "a.db", server.remote("merge"))?;
    a.save_all(&x)?;
    a.remote().expect("a remote").push()?;
    a.close()?;
    let cut = moment();
    // Two machines use every object after the cut: two use reports, which a trim merges.
    for (name, half) in [("r1.db", &x[..150]), ("r2.db", &x[150..])] {
        let reader = open(dir.path(), name, server.remote("merge"))?;
        assert!(reader.get_many(&keys_of(half))?.iter().all(Option::is_some));
        // Its uses go up now, not within the ten minutes a closing handle parks them.
        if let Some(remote) = reader.remote() {
            remote.report_uses()?;
        }
        reader.close()?;
    }
    // The first trim cannot read the pack's index: it leaves the pack and says so, and the
    // uses it merged must still hold for that pack's objects.
    let proxy = crate::common::faulty::FaultyProxy::start(&server.endpoint());
    proxy.fail_reads_of("/merge/indexes/");
    let through = crate::common::s3::remote_at(&proxy.endpoint(), "merge");
    let t = trimmer(dir.path(), "t.db", through)?;
    let first = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert!(!first.is_complete() && first.reports == 2, "{first}");
    proxy.heal();
    let second = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert!(second.is_complete(), "{second}");
    assert_eq!(second.unused, 0, "{second}");
    let fresh = open(dir.path(), "fresh.db", server.remote("merge"))?;
    assert_remote_holds(&fresh, &x, &[], "after the trims")
}

#[test]
fn beyond_the_size_the_least_recently_used_packs_go() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let x = crate::common::objects(51, 1_500);
    let y = crate::common::objects(52, 1_500);
    let a = open(dir.path(), "a.db", small_packs(server.remote("size")))?;
    a.save_all(&x)?;
    a.remote().expect("a remote").push()?;
    let with_x: std::collections::HashSet<String> =
        bucket_files(&server, "size")?.into_iter().map(|(name, _)| name).collect();
    a.save_all(&y)?;
    a.remote().expect("a remote").push()?;
    // Y's packs: their bodies and indexes.
    let y_bytes: u64 = bucket_files(&server, "size")?
        .into_iter()
        .filter(|(name, _)| {
            !with_x.contains(name)
                && (name.starts_with("size/packs/") || name.starts_with("size/indexes/"))
        })
        .map(|(_, size)| size)
        .sum();
    a.close()?;
    // X, pushed first, is read later than Y was pushed: Y is the least recently used.
    moment();
    let reader = open(dir.path(), "reader.db", server.remote("size"))?;
    assert!(reader.get_many(&keys_of(&x))?.iter().all(Option::is_some));
    // Its uses go up now, not within the ten minutes a closing handle parks them.
    if let Some(remote) = reader.remote() {
        remote.report_uses()?;
    }
    reader.close()?;
    // Room for everything but Y, and for the trim's lease (a few bytes).
    let max = bucket_bytes(&server, "size")? - y_bytes + 1_024;
    let t = trimmer(dir.path(), "t.db", server.remote("size"))?;
    let trimmed = t
        .remote()
        .expect("a remote")
        .trim(&TrimOptions::default().max_size(max).grace(Duration::ZERO))?;
    assert!(trimmed.over_size >= 1 && trimmed.size_after <= max, "{trimmed}");
    assert_eq!(trimmed.unused, 0, "{trimmed}");
    let fresh = open(dir.path(), "fresh.db", server.remote("size"))?;
    let what = format!("after a trim to {max} ({y_bytes} of Y): {trimmed}");
    assert_remote_holds(&fresh, &x, &y, &what)?;
    Ok(())
}

#[test]
fn the_size_a_trim_keeps_to_is_the_buckets_under_the_prefix() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let sets: Vec<Vec<Vec<u8>>> = (0..4).map(|i| crate::common::objects(60 + i, 1_000)).collect();
    for (i, set) in sets.iter().enumerate() {
        let a = open(dir.path(), &format!("a{i}.db"), small_packs(server.remote("bucket")))?;
        a.save_all(set)?;
        a.remote().expect("a remote").push()?;
        a.close()?;
    }
    moment();
    // The last set is read: its packs are the most recently used, and uses go up.
    let reader = open(dir.path(), "reader.db", server.remote("bucket"))?;
    assert!(reader.get_many(&keys_of(&sets[3]))?.iter().all(Option::is_some));
    reader.remote().expect("a remote").report_uses()?;
    reader.close()?;
    let before = bucket_bytes(&server, "bucket")?;
    let max = before / 2;
    let t = trimmer(dir.path(), "t.db", server.remote("bucket"))?;
    let trimmed = t
        .remote()
        .expect("a remote")
        .trim(&TrimOptions::default().max_size(max).grace(Duration::ZERO))?;
    // The trim counts what a listing of the bucket sums, and its lease (a few bytes).
    assert!(
        (before..before + 1_024).contains(&trimmed.size_before) && trimmed.size_after <= max,
        "{before} bytes before a trim to {max}: {trimmed}"
    );
    t.remote().expect("a remote").collect(&CollectOptions::default().grace(Duration::ZERO))?;
    // Everything under the prefix counts: bodies, indexes, shards, the log and use
    // reports. Only the record of the trim, written after it, may add to it.
    let after = bucket_bytes(&server, "bucket")?;
    let record = t.remote().expect("a remote").last_trim()?.map_or(0, |r| r.len() as u64);
    assert!(
        after <= max + record,
        "{after} bytes under the prefix after a trim to {max} (from {before}): {trimmed}"
    );
    let fresh = open(dir.path(), "fresh.db", server.remote("bucket"))?;
    assert_remote_holds(&fresh, &sets[3], &[], "the most recently used")?;
    Ok(())
}

#[test]
fn a_push_that_relied_on_a_pack_a_trim_took_out_sends_its_objects_again() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let x = crate::common::objects(61, 1_000);
    let a = open(dir.path(), "a.db", small_packs(server.remote("relied")))?;
    a.save_all(&x)?;
    a.remote().expect("a remote").push()?;
    a.close()?;
    let cut = moment();
    // A machine with write-behind whose copy of the indexes says the remote holds X.
    let remote = small_packs(server.remote("relied"))
        .write_behind(Duration::from_millis(50))
        .refresh_interval(Duration::from_secs(3_600));
    let p = open(dir.path(), "p.db", remote)?;
    p.remote().expect("a remote").flush()?;
    assert_eq!(p.remote().expect("a remote").refresh()?.objects, 1_000);
    // A trim takes X out: nobody used it since the cut.
    let t = trimmer(dir.path(), "t.db", server.remote("relied"))?;
    let trimmed = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert!(trimmed.unused > 0 && trimmed.size_after < trimmed.size_before, "{trimmed}");
    let gone = open(dir.path(), "gone.db", server.remote("relied"))?;
    assert_remote_holds(&gone, &[], &x, "after the trim")?;
    // The machine saves X; its background push finds X on the remote by its stale copy
    // and does not send it, then sees X went and sends it.
    p.save_all(&x)?;
    p.remote().expect("a remote").flush()?;
    let fresh = open(dir.path(), "fresh.db", server.remote("relied"))?;
    assert_remote_holds(&fresh, &x, &[], "after the push")?;
    Ok(())
}

#[test]
fn trims_and_collections_beside_pushing_processes_and_a_reader_lose_nothing_in_use() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    // X is on the remote and unused since the cut; the two pushers hold Y, and the second
    // holds X too (its push relies on X and reports it used).
    let x = crate::common::objects(71, 3_000);
    let y = crate::common::objects(72, 6_000);
    {
        let old = open(dir.path(), "old.db", small_packs(server.remote("busy")))?;
        old.save_all(&x)?;
        old.remote().expect("a remote").push()?;
        // Its uses go up now, not within the ten minutes a closing handle parks them.
        if let Some(remote) = old.remote() {
            remote.report_uses()?;
        }
        old.close()?;
    }
    let cut = moment();
    for (name, models) in [("a.db", vec![&y]), ("b.db", vec![&x, &y])] {
        let stash = Stash::open(dir.path().join(name))?;
        for model in models {
            stash.save_all(&model.iter().rev().cloned().collect::<Vec<_>>())?;
        }
        // Its uses go up now, not within the ten minutes a closing handle parks them.
        if let Some(remote) = stash.remote() {
            remote.report_uses()?;
        }
        stash.close()?;
    }
    let everything: Arc<Vec<Vec<u8>>> = Arc::new(x.iter().chain(&y).cloned().collect());
    let dbs = ["a.db", "b.db"].map(|name| dir.path().join(name));
    let mut children = start_pushes(&server, &dbs, "busy")?;
    let reader = ReadingMachine::start(
        &dir.path().join("reader.db"),
        server.remote("busy"),
        everything.clone(),
    )?;
    let t = trimmer(dir.path(), "t.db", server.remote("busy"))?;
    let collect = CollectOptions::default().grace(Duration::ZERO);
    let mut rounds = 0;
    let mut taken_out = 0;
    while children.iter_mut().any(|c| c.try_wait().ok().flatten().is_none()) {
        let trimmed = t.remote().expect("a remote").trim(&unused_since(cut))?;
        taken_out += trimmed.unused + trimmed.repacked;
        t.remote().expect("a remote").collect(&collect)?;
        rounds += 1;
    }
    finish_pushes(children)?;
    // Everything the pushes acknowledged is in use: the last trims keep it.
    for _ in 0..2 {
        t.remote().expect("a remote").trim(&unused_since(cut))?;
        t.remote().expect("a remote").collect(&collect)?;
    }
    let served = reader.stop_after(500)?;
    eprintln!(
        "{rounds} trims and collections during the pushes took out {taken_out} packs; the \
         reader served {served}"
    );
    let fresh = open(dir.path(), "fresh.db", server.remote("busy"))?;
    assert_remote_holds(&fresh, &everything, &[], "after the pushes")?;
    Ok(())
}

#[test]
fn a_pack_a_machine_uses_while_a_trim_takes_it_out_comes_back() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let x = crate::common::objects(81, 1_000);
    let y = crate::common::objects(82, 1_000);
    let a = open(dir.path(), "a.db", small_packs(server.remote("back")))?;
    for model in [&x, &y] {
        a.save_all(model)?;
        a.remote().expect("a remote").push()?;
    }
    a.close()?;
    let cut = moment();
    // A machine that knows where X is reads it right after the trim took it out (nobody
    // had used it since the cut), and reports the use.
    let db = dir.path().join("reader.db");
    Stash::open(&db)?.close()?;
    let reader =
        Arc::new(Stash::builder().remote(server.remote("back")).read_only(true).open(&db)?);
    reader.remote().expect("a remote").refresh()?;
    let (x_keys, x_objects, user) = (keys_of(&x), x.clone(), reader.clone());
    let options = unused_since(cut).after_taking_out(move || {
        let got = user.get_many(&x_keys).expect("a read during the trim");
        assert!(got.iter().zip(&x_objects).all(|(g, o)| g.as_deref() == Some(&o[..])));
        user.remote().expect("a remote").flush().expect("the use reported");
    });
    let t = trimmer(dir.path(), "t.db", server.remote("back"))?;
    let trimmed = t.remote().expect("a remote").trim(&options)?;
    assert!(trimmed.unused >= 2 && trimmed.brought_back >= 1, "{trimmed}");
    let fresh = open(dir.path(), "fresh.db", server.remote("back"))?;
    assert_remote_holds(&fresh, &x, &y, "after the trim")?;
    // And the next trim keeps X: its use is on record.
    let again = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert_eq!((again.unused, again.repacked), (0, 0), "{again}");
    Ok(())
}

/// Environment variable that makes `trim_child` trim: `<db>|<endpoint>|<prefix>:<cut ms>`.
const TRIM_CHILD: &str = "OBJSTASH_TEST_TRIM_CHILD";

/// Trims what was not used since the cut, in a child process, to be killed mid-trim by
/// `trims_killed_at_random_moments_lose_nothing_in_use`; waits for a killed trim's lease.
#[test]
#[ignore = "child process of a kill test"]
fn trim_child() -> TestResult {
    let Some((db, endpoint, spec)) = crate::remote::child_spec(TRIM_CHILD) else { return Ok(()) };
    let (prefix, cut) = spec.split_once(':').expect("prefix:cut");
    let remote = crate::common::s3::remote_at(&endpoint, prefix).clock_skew(Duration::ZERO);
    let stash = Stash::builder().remote(remote).open(&db)?;
    std::fs::write(crate::common::sibling(Path::new(&db), ".acked"), "open")?;
    let options = unused_since(cut.parse()?).lease(Duration::from_secs(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        match stash.remote().expect("a remote").trim(&options) {
            Err(e)
                if e.to_string().contains("holds it") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other.map(drop).map_err(Into::into),
        }
    }
}

#[test]
fn trims_killed_at_random_moments_lose_nothing_in_use() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    let x = crate::common::objects(91, 3_000);
    let y = crate::common::objects(92, 3_000);
    let z = crate::common::objects(93, 3_000);
    let (z_used, z_unused): (Vec<_>, Vec<_>) =
        z.chunks(3).map(|c| (c[0].clone(), c[1..].to_vec())).unzip();
    let z_unused: Vec<Vec<u8>> = z_unused.into_iter().flatten().collect();
    let a = open(dir.path(), "a.db", small_packs(server.remote("trimkill")))?;
    for model in [&x, &y, &z] {
        a.save_all(model)?;
        a.remote().expect("a remote").push()?;
    }
    a.close()?;
    let cut = moment();
    let in_use: Vec<Vec<u8>> = y.iter().chain(&z_used).cloned().collect();
    let reader = open(dir.path(), "reader.db", server.remote("trimkill"))?;
    assert!(reader.get_many(&keys_of(&in_use))?.iter().all(Option::is_some));
    // Its uses go up now, not within the ten minutes a closing handle parks them.
    if let Some(remote) = reader.remote() {
        remote.report_uses()?;
    }
    reader.close()?;
    // Progress of a trim, as the remote shows it: packs taken out, new packs, bodies gone.
    let files =
        |folder: &str| rt.block_on(crate::remote::list(&store, &format!("trimkill/{folder}")));
    let count = |folder: &str| files(folder).map(|f| f.len());
    let progress = || -> anyhow::Result<usize> {
        let gone = rt
            .block_on(crate::remote::list(&store, "trimkill/log"))?
            .iter()
            .filter(|e| e.ends_with(".gone"))
            .count();
        Ok(gone + count("moved")? + count("uses")?)
    };
    let db = dir.path().join("trimmer.db");
    let spec = format!("{}|{}|trimkill:{cut}", db.display(), server.endpoint());
    let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(std::process::id());
    let mut killed_mid_trim = 0;
    for round in 0..8 {
        let _ = std::fs::remove_file(crate::common::sibling(&db, ".acked"));
        let mut child =
            crate::common::spawn_child("remote_trim::trim_child", TRIM_CHILD, spec.clone())?;
        crate::common::wait_until_open(&db, &mut child)?;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let goal = progress()? + 1 + (seed % 5) as usize;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let reached = loop {
            if progress()? >= goal {
                break true;
            }
            if child.try_wait()?.is_some() {
                break false;
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "round {round}: no progress");
            std::thread::sleep(Duration::from_millis(5));
        };
        child.kill()?; // SIGKILL
        child.wait()?;
        killed_mid_trim += usize::from(reached);
        // Every listed pack has its body, and everything in use is on the remote and reads
        // back (reading only what is in use: a pull would be a use of everything).
        let bodies: std::collections::HashSet<String> = files("packs")?
            .into_iter()
            .filter_map(|p| p.rsplit('/').next().map(str::to_string))
            .collect();
        for index in files("indexes")? {
            let name = index.rsplit('/').next().unwrap_or_default();
            anyhow::ensure!(
                bodies.contains(name),
                "round {round}: pack {name} listed without a body"
            );
        }
        let fresh = open(dir.path(), &format!("fresh{round}.db"), server.remote("trimkill"))?;
        assert_remote_holds(&fresh, &in_use, &[], &format!("round {round}"))?;
        // Its uses go up now, not within the ten minutes a closing handle parks them.
        if let Some(remote) = fresh.remote() {
            remote.report_uses()?;
        }
        fresh.close()?;
        if !reached {
            break;
        }
    }
    // A trim that runs to the end leaves exactly what is in use (one the server failed
    // for left some packs as they were and says so: trimmed again, as a user would). It
    // repacks every pack that holds an unused object: by default a pack whose objects in
    // use are most of its bytes stays whole, and which packs those are depends on the
    // order the writer committed the objects in, which the parallel compressors vary.
    let t = trimmer(dir.path(), "t.db", server.remote("trimkill"))?;
    let options = unused_since(cut).lease(Duration::from_secs(2)).repack_below(1.0);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let last = loop {
        let in_time = std::time::Instant::now() < deadline;
        match t.remote().expect("a remote").trim(&options) {
            Err(e) if e.to_string().contains("holds it") && in_time => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(report) if !report.is_complete() && in_time => eprintln!("{report}"),
            other => break other?,
        }
    };
    assert!(last.is_complete(), "{last}");
    eprintln!("{killed_mid_trim} trims killed mid-way; the last: {last}");
    let gone: Vec<Vec<u8>> = x.iter().chain(&z_unused).cloned().collect();
    let fresh = open(dir.path(), "last.db", server.remote("trimkill"))?;
    if let Err(e) = assert_remote_holds(&fresh, &in_use, &gone, "after the last trim") {
        explain_leftovers(&rt, &store, "trimkill", &fresh, &gone)?;
        return Err(e);
    }
    assert!(killed_mid_trim >= 3, "only {killed_mid_trim} kills landed mid-trim");
    Ok(())
}

/// Prints, for a failure, which listed packs still hold objects of `absent` and what the
/// remote says of each: its events, whether it is marked as moved or kept as trimmed.
fn explain_leftovers(
    rt: &tokio::runtime::Runtime,
    store: &object_store::aws::AmazonS3,
    prefix: &str,
    stash: &Stash,
    absent: &[Vec<u8>],
) -> TestResult {
    use object_store::ObjectStore;
    let keys = keys_of(absent);
    let missing: std::collections::HashSet<Key> =
        stash.remote().expect("a remote").missing(&keys)?.into_iter().collect();
    let left: Vec<Key> = keys.into_iter().filter(|k| !missing.contains(k)).collect();
    let log = rt.block_on(crate::remote::list(store, &format!("{prefix}/log")))?;
    let moved = rt.block_on(crate::remote::list(store, &format!("{prefix}/moved")))?;
    let trimmed = rt.block_on(crate::remote::list(store, &format!("{prefix}/trimmed")))?;
    for index in rt.block_on(crate::remote::list(store, &format!("{prefix}/indexes")))? {
        let path = object_store::path::Path::from(index.as_str());
        let bytes = rt.block_on(async { store.get(&path).await?.bytes().await })?;
        let held =
            left.iter().filter(|k| bytes.windows(32).any(|w| w == &k.as_bytes()[..])).count();
        if held == 0 {
            continue;
        }
        let name = index.rsplit('/').next().unwrap_or_default();
        let events: Vec<&str> = log
            .iter()
            .filter(|e| e.contains(name))
            .map(|e| e.rsplit('/').next().unwrap_or(e))
            .collect();
        eprintln!(
            "pack {name}: {held} of the {} left, index {} bytes; moved {}, trimmed {}; events {events:?}",
            left.len(),
            bytes.len(),
            moved.iter().any(|m| m.ends_with(name)),
            trimmed.iter().any(|m| m.ends_with(name)),
        );
    }
    Ok(())
}

/// A model goes whole: a machine that read one object of a pushed model used the model,
/// so a trim by age keeps every pack its objects are in, and takes out the loose objects
/// nobody used. (Before models reached the remote, the trim kept only the pack of the one
/// object read, and the model's other objects went.)
#[test]
fn a_trim_keeps_a_model_whole_when_one_of_its_objects_was_used() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let members = crate::common::objects(71, 1_200);
    let root = b"{\"root\": \"of the model\"}".to_vec();
    let loose = crate::common::objects(72, 1_200);
    let a = open(dir.path(), "a.db", small_packs(server.remote("model")))?;
    a.save_model(&root, &members)?;
    a.save_all(&loose)?;
    let pushed = a.remote().expect("a remote").push()?;
    assert_eq!(pushed.models, 1, "{pushed}");
    assert!(pushed.packs > 4, "the model spans several packs: {pushed}");
    a.close()?;
    let cut = moment();
    // One object of the model read through on another machine, and its use reported.
    let reader = open(dir.path(), "reader.db", server.remote("model"))?;
    assert!(reader.get(&Key::of(&members[0]))?.is_some());
    reader.remote().expect("a remote").report_uses()?;
    reader.close()?;
    let t = trimmer(dir.path(), "t.db", server.remote("model"))?;
    let trimmed = t.remote().expect("a remote").trim(&unused_since(cut))?;
    assert!(trimmed.unused > 0, "the loose objects' packs go: {trimmed}");
    let fresh = open(dir.path(), "fresh.db", server.remote("model"))?;
    let whole: Vec<Vec<u8>> = members.iter().chain([&root]).cloned().collect();
    assert_remote_holds(&fresh, &whole, &loose, &format!("after {trimmed}"))?;
    // A second push finds the model's file there and sends none.
    let again = open(dir.path(), "a.db", small_packs(server.remote("model")))?;
    assert_eq!(again.remote().expect("a remote").push()?.models, 0);
    Ok(())
}
