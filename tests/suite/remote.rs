//! The remote tier against a real S3-compatible server (SeaweedFS on loopback, started by
//! each test: tests/suite/common/s3.rs): push, read-through, pull, `remote_missing`, and the
//! faults: a damaged pack, the server stopped mid-push and mid-read, pushes killed with
//! SIGKILL, a volume server of two stopped.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::TestResult;
use crate::common::s3::S3Server;
use objstash::{Error, Key, RemoteConfig, Stash};

/// A stash at `dir/name` with `remote`.
pub(crate) fn open(dir: &Path, name: &str, remote: RemoteConfig) -> objstash::Result<Stash> {
    Stash::builder().remote(remote).open(dir.join(name))
}

/// Small packs, so that a few thousand objects make many.
pub(crate) fn small_packs(config: RemoteConfig) -> RemoteConfig {
    config.pack_size(64 << 10)
}

#[test]
fn push_read_through_and_pull_between_two_stashes() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("team"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let objects = crate::common::objects(1, 6_000);
    let keys = a.save_all(&objects)?;

    let pushed = a.remote().expect("a remote").push()?;
    assert_eq!(pushed.objects, 6_000, "{pushed}");
    assert!(pushed.packs >= 10, "{pushed}");
    // Body, index and log event per pack, a listing: nothing per object.
    assert!(pushed.requests <= 3 * pushed.packs + 2, "{pushed}");
    let again = a.remote().expect("a remote").push()?;
    assert_eq!((again.objects, again.already_remote, again.packs), (0, 6_000, 0), "{again}");

    let b = open(dir.path(), "b.db", remote.clone())?;
    let before = b.remote().expect("a remote").refresh()?;
    assert_eq!(before.objects, 6_000);
    // Read-through: one key, then many; each is checked, stored and returned.
    assert_eq!(b.get(&keys[17])?.as_deref(), Some(&objects[17][..]));
    assert!(b.contains(&keys[17])?);
    let wanted: Vec<Key> = keys.iter().step_by(7).copied().collect();
    let got = b.get_many(&wanted)?;
    for (i, value) in got.iter().enumerate() {
        assert_eq!(value.as_deref(), Some(&objects[i * 7][..]));
    }
    assert_eq!(b.get(&Key::of(b"nowhere"))?, None);
    assert_eq!(
        b.remote().expect("a remote").missing(&[keys[0], Key::of(b"nowhere")])?,
        vec![Key::of(b"nowhere")]
    );

    let pulled = b.remote().expect("a remote").pull()?;
    assert_eq!(pulled.objects + pulled.already_local, 6_000, "{pulled}");
    assert!(pulled.damaged.is_empty());
    assert!(pulled.requests < pulled.objects / 20, "{pulled}");
    assert_eq!(b.len()?, 6_000);
    assert!(b.verify()?.is_ok());
    assert!(b.missing(&keys)?.is_empty());
    Ok(())
}

#[test]
fn a_refresh_lists_only_what_the_pack_log_added_in_one_request() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("log"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let mut keys = a.save_all(&crate::common::objects(5, 4_000))?;
    let pushed = a.remote().expect("a remote").push()?;
    assert!(pushed.packs >= 5, "{pushed}");
    // B shares A's clock: it needs no margin to see every event.
    let b = open(dir.path(), "b.db", remote.clone().clock_skew(Duration::ZERO))?;
    let b_remote = b.remote().expect("a remote");
    // A catalog's first refresh asks for a compacted index (there is none), lists every
    // index and reads each.
    let first = b_remote.refresh()?;
    assert!(first.full_listing, "{first}");
    assert_eq!((first.new_packs, first.requests), (pushed.packs, 2 + pushed.packs), "{first}");
    assert_eq!(first.listed, pushed.packs, "{first}");
    // The remote's size, and what this machine holds of its indexes.
    assert_eq!(first.bytes, pushed.bytes, "{first}");
    assert!(first.local_index_bytes > 52 * 4_000, "{first}");
    // Nothing new: one request that lists nothing, whatever the remote holds.
    let idle = b_remote.refresh()?;
    assert!(!idle.full_listing, "{idle}");
    assert_eq!((idle.requests, idle.listed, idle.packs), (1, 0, pushed.packs), "{idle}");
    // A pushes more: one listing and the new indexes, not the old ones.
    keys.extend(a.save_all(&crate::common::objects(6, 1_500))?);
    let more = a.remote().expect("a remote").push()?;
    let after = b_remote.refresh()?;
    assert_eq!((after.new_packs, after.requests), (more.packs, 1 + more.packs), "{after}");
    assert_eq!(after.listed, more.packs, "{after}");
    assert_eq!(after.objects, 5_500, "{after}");
    assert!(b_remote.missing(&keys)?.is_empty());
    // A catalog deleted is rebuilt by a full listing.
    drop(b);
    std::fs::remove_file(dir.path().join("b.db-remote"))?;
    let b = open(dir.path(), "b.db", remote.clone())?;
    let rebuilt = b.remote().expect("a remote").refresh()?;
    assert!(rebuilt.full_listing, "{rebuilt}");
    assert_eq!(rebuilt.packs, pushed.packs + more.packs, "{rebuilt}");
    Ok(())
}

#[test]
fn a_pack_announced_by_a_machine_whose_clock_is_behind_is_found() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("skew"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    a.save_all(&crate::common::objects(7, 500))?;
    a.remote().expect("a remote").push()?;
    // B has listed the remote (the default margin: clocks may disagree by 10 minutes).
    let b = open(dir.path(), "b.db", remote.clone())?;
    b.remote().expect("a remote").refresh()?;

    let store = server.store();
    let rt = tokio::runtime::Runtime::new()?;
    let before = rt.block_on(list(&store, "skew/log"))?;
    let keys = a.save_all(&crate::common::objects(8, 2_000))?;
    let more = a.remote().expect("a remote").push()?;
    // A's new events, rewritten as a machine whose clock is 5 minutes behind B's writes them.
    let events: Vec<String> = rt
        .block_on(list(&store, "skew/log"))?
        .into_iter()
        .filter(|name| !before.contains(name))
        .collect();
    assert_eq!(events.len() as u64, more.packs);
    rt.block_on(async {
        use object_store::ObjectStore;
        for event in &events {
            let (folder, file) = event.rsplit_once('/').expect("a folder");
            let (ms, rest) = file.split_once('-').expect("<ms>-<pack>.pack");
            let behind = format!("{folder}/{:013}-{rest}", ms.parse::<u64>()? - 300_000);
            store.put(&behind.as_str().into(), bytes::Bytes::new().into()).await?;
            store.delete(&event.as_str().into()).await?;
        }
        anyhow::Ok(())
    })?;
    let found = b.remote().expect("a remote").refresh()?;
    assert!(!found.full_listing, "{found}");
    assert_eq!(found.new_packs, more.packs, "{found}");
    assert!(b.remote().expect("a remote").missing(&keys)?.is_empty());
    Ok(())
}

#[test]
fn a_stash_without_a_remote_or_with_a_bad_one_says_so() -> TestResult {
    let dir = tempfile::tempdir()?;
    let plain = Stash::open(dir.path().join("plain.db"))?;
    assert!(plain.remote().is_none(), "a stash opened without a remote has no remote tier");
    assert!(RemoteConfig::new("s3://x").is_err());
    assert!(
        Stash::builder()
            .remote(RemoteConfig::new("s3://abc")?.pack_size(10))
            .open(dir.path().join("bad.db"))
            .is_err()
    );
    Ok(())
}

#[test]
fn a_damaged_pack_is_never_served_and_a_later_push_heals_it() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("damage"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let objects = crate::common::objects(2, 3_000);
    let keys = a.save_all(&objects)?;
    a.remote().expect("a remote").push()?;

    // Flip one byte in the middle of one pack body.
    let store = server.store();
    let rt = tokio::runtime::Runtime::new()?;
    let bodies = rt.block_on(list(&store, "damage/packs"))?;
    assert!(bodies.len() >= 4);
    let victim = &bodies[0];
    rt.block_on(flip_middle_byte(&store, victim))?;
    let pack = victim.rsplit('/').next().unwrap().to_string();

    let b = open(dir.path(), "b.db", remote.clone())?;
    let pulled = b.remote().expect("a remote").pull()?;
    assert_eq!(pulled.damaged.len(), 1, "{pulled}");
    assert_eq!(pulled.damaged[0].pack, pack);
    let lost = pulled.damaged[0].objects;
    assert!(lost >= 1);
    assert_eq!(pulled.objects, 3_000 - lost, "{pulled}");
    // What failed was not stored, everything stored verifies.
    assert_eq!(b.missing(&keys)?.len() as u64, lost);
    assert!(b.verify()?.is_ok());
    // The pack is out of the listing: A pushes its objects again, and B finds them all.
    let healed = a.remote().expect("a remote").push()?;
    assert!(healed.objects >= lost, "{healed}");
    let again = b.remote().expect("a remote").pull()?;
    assert!(again.damaged.is_empty(), "{again}");
    assert!(b.missing(&keys)?.is_empty());
    for (key, object) in keys.iter().zip(&objects).step_by(97) {
        assert_eq!(b.get(key)?.as_deref(), Some(&object[..]));
    }
    Ok(())
}

#[test]
fn a_damaged_read_through_is_an_error_that_names_the_pack() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = server.remote("readdamage");
    let a = open(dir.path(), "a.db", remote.clone())?;
    let object = crate::common::noise(3, 4_000);
    let key = a.save(&object)?;
    a.remote().expect("a remote").push()?;
    let store = server.store();
    let rt = tokio::runtime::Runtime::new()?;
    let bodies = rt.block_on(list(&store, "readdamage/packs"))?;
    rt.block_on(async {
        use object_store::ObjectStore;
        let path = object_store::path::Path::from(bodies[0].as_str());
        let mut bytes = store.get(&path).await?.bytes().await?.to_vec();
        let at = bytes.len() - 12;
        bytes[at] ^= 1;
        store.put(&path, bytes.into()).await?;
        anyhow::Ok(())
    })?;
    let b = open(dir.path(), "b.db", remote)?;
    match b.get(&key) {
        Err(Error::RemoteCorrupt { key: k, pack, .. }) => {
            assert_eq!(k, key);
            assert!(bodies[0].ends_with(&pack));
        }
        other => panic!("expected RemoteCorrupt, got {other:?}"),
    }
    assert!(!b.contains(&key)?, "damaged bytes were stored");
    Ok(())
}

#[test]
fn the_server_stopped_mid_push_and_mid_read_costs_nothing_local() -> TestResult {
    let mut server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("outage"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let objects = crate::common::objects(4, 40_000);
    let keys = a.save_all(&objects)?;
    a.flush()?;

    // The server stops once the push has listed a few of its many packs.
    let store = server.store();
    let stopped = std::thread::scope(|s| -> anyhow::Result<_> {
        let push = s.spawn(|| a.remote().expect("a remote").push());
        let reached = wait_for_packs(&store, "outage", 3, || push.is_finished())?;
        anyhow::ensure!(reached, "the push ended before it listed 3 packs: {:?}", push.join());
        server.stop();
        Ok(push.join().unwrap())
    })?;
    assert!(matches!(stopped, Err(Error::Remote { .. })), "{stopped:?}");
    // The stash works on without its remote.
    assert_eq!(a.get(&keys[5])?.as_deref(), Some(&objects[5][..]));
    let extra = a.save(b"saved while the remote is down")?;
    assert!(a.remote().expect("a remote").push().is_err());
    let b = open(dir.path(), "b.db", remote.clone())?;
    assert!(matches!(b.get(&keys[1]), Err(Error::Remote { .. })));
    // Further misses answer with that failure at once: no request is sent for them.
    let requests = b.remote().expect("a remote").requests();
    for key in &keys[2..50] {
        assert!(matches!(b.get(key), Err(Error::Remote { .. })));
    }
    assert_eq!(b.remote().expect("a remote").requests(), requests, "48 misses went out");

    server.restart();
    let done = retry(|| a.remote().expect("a remote").push())?;
    assert_eq!(done.objects + done.already_remote, 40_001, "{done}");

    // Mid-read: the server stops while B pulls (once B holds some of the objects). What B
    // stored is checked and right.
    let during = std::thread::scope(|s| -> anyhow::Result<_> {
        let pull = s.spawn(|| b.remote().expect("a remote").pull());
        let deadline = Instant::now() + Duration::from_secs(120);
        while b.len()? == 0 && !pull.is_finished() {
            anyhow::ensure!(Instant::now() < deadline, "the pull stored nothing");
            std::thread::sleep(Duration::from_millis(5));
        }
        server.stop();
        Ok(pull.join().unwrap())
    })?;
    eprintln!("pull while the server stopped: {during:?}");
    match &during {
        Ok(report) => assert!(report.damaged.is_empty(), "{report}"),
        Err(Error::Remote { .. }) => {}
        Err(e) => panic!("expected a remote error, got {e}"),
    }
    assert!(b.verify()?.is_ok());
    for (key, object) in keys.iter().zip(&objects).step_by(13) {
        if b.contains(key)? {
            assert_eq!(b.get(key)?.as_deref(), Some(&object[..]));
        }
    }
    server.restart();
    // Right after a restart the volume server may not have rejoined yet: a pull says
    // which packs it could not read, and a later one completes.
    pull_until_complete(&b)?;
    assert!(b.missing(&keys)?.is_empty());
    assert_eq!(b.get(&extra)?.as_deref(), Some(&b"saved while the remote is down"[..]));
    assert!(b.verify()?.is_ok());
    Ok(())
}

/// How long a restarted server may take to serve again before a test calls it a hang: a
/// deadline, never what a test decides from (a busy machine restarts SeaweedFS slowly).
const RECOVERY: Duration = Duration::from_secs(240);

/// `f` again while the remote fails (a server just restarted), until [`RECOVERY`].
fn retry<T>(mut f: impl FnMut() -> objstash::Result<T>) -> objstash::Result<T> {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match f() {
            Err(Error::Remote { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Pulls until a pull reports every pack read (until [`RECOVERY`]).
fn pull_until_complete(stash: &Stash) -> TestResult {
    let deadline = Instant::now() + RECOVERY;
    loop {
        let pulled = retry(|| stash.remote().expect("a remote").pull())?;
        assert!(pulled.damaged.is_empty(), "{pulled}");
        if pulled.is_complete() {
            return Ok(());
        }
        assert!(Instant::now() < deadline, "still incomplete: {pulled}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The keys of every object under `prefix`.
pub(crate) async fn list(
    store: &object_store::aws::AmazonS3,
    prefix: &str,
) -> anyhow::Result<Vec<String>> {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let metas: Vec<_> =
        store.list(Some(&object_store::path::Path::from(prefix))).try_collect().await?;
    let mut names: Vec<String> = metas.into_iter().map(|m| m.location.to_string()).collect();
    names.sort();
    Ok(names)
}

/// Flips one bit of the byte in the middle of the remote file `name`.
pub(crate) async fn flip_middle_byte(
    store: &object_store::aws::AmazonS3,
    name: &str,
) -> anyhow::Result<()> {
    use object_store::ObjectStore;
    let path = object_store::path::Path::from(name);
    let mut bytes = store.get(&path).await?.bytes().await?.to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    store.put(&path, bytes.into()).await?;
    Ok(())
}

/// Waits until the pack log on the server (`prefix/log/`) announces at least `count` packs
/// (a push has made that much progress: an announced pack is listed, its body and index
/// written before), or `done` says the push is over; whether it got there.
fn wait_for_packs(
    store: &object_store::aws::AmazonS3,
    prefix: &str,
    count: usize,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<bool> {
    let rt = tokio::runtime::Runtime::new()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if rt.block_on(list(store, &format!("{prefix}/log")))?.len() >= count {
            return Ok(true);
        }
        if done() {
            return Ok(false);
        }
        anyhow::ensure!(Instant::now() < deadline, "the push never listed {count} packs");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a child process was told in `env`: `<db>|<endpoint>|<prefix>`; `None` when the
/// test runs as itself, not as a child.
pub(crate) fn child_spec(env: &str) -> Option<(String, String, String)> {
    let spec = std::env::var(env).ok()?;
    let mut parts = spec.split('|').map(str::to_string);
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// Environment variable that makes `push_child` push: `<db>|<endpoint>|<prefix>`.
pub(crate) const PUSH_CHILD: &str = "OBJSTASH_TEST_PUSH_CHILD";

/// Pushes a stash in a child process, to be killed mid-push by
/// `pushes_killed_at_random_moments_leave_nothing_half_visible`.
#[test]
#[ignore = "child process of a kill test"]
fn push_child() -> TestResult {
    let Some((db, endpoint, prefix)) = child_spec(PUSH_CHILD) else { return Ok(()) };
    let remote = crate::common::s3::remote_at(&endpoint, &prefix).pack_size(64 << 10).uploads(1);
    let stash = Stash::builder().remote(remote).open(&db)?;
    std::fs::write(crate::common::sibling(Path::new(&db), ".acked"), "open")?;
    stash.remote().expect("a remote").push()?;
    Ok(())
}

#[test]
fn pushes_killed_at_random_moments_leave_nothing_half_visible() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let objects = crate::common::objects(5, 60_000);
    let keys = {
        let a = Stash::open(&db)?;
        let keys = a.save_all(&objects)?;
        a.close()?;
        keys
    };
    let spec = format!("{}|{}|killed", db.display(), server.endpoint());
    let mut listed = 0;
    let mut cut_short = 0;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ u64::from(std::process::id());
    let store = server.store();
    let mut killed_mid_push = 0;
    let rt = tokio::runtime::Runtime::new()?;
    for round in 0..10 {
        let _ = std::fs::remove_file(crate::common::sibling(&db, ".acked"));
        let mut child = crate::common::spawn_child("remote::push_child", PUSH_CHILD, spec.clone())?;
        crate::common::wait_until_open(&db, &mut child)?;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Killed once this push has listed 1 to 8 packs of its own (of the hundreds it
        // has to send), so that every kill lands in the middle of a push.
        let before = rt.block_on(list(&store, "killed/log"))?.len();
        let goal = before + 1 + (seed % 8) as usize;
        let reached =
            wait_for_packs(&store, "killed", goal, || child.try_wait().ok().flatten().is_some())?;
        child.kill()?; // SIGKILL
        child.wait()?;
        killed_mid_push += usize::from(reached);
        // A new stash pulls whatever is listed: every listed pack is whole (its body is
        // there and every object checks), and the listing only grows.
        let c = open(dir.path(), &format!("c{round}.db"), server.remote("killed"))?;
        let pulled = c.remote().expect("a remote").pull()?;
        assert!(pulled.is_complete(), "round {round}: {pulled}");
        assert!(pulled.objects >= listed, "round {round}: {pulled} after {listed}");
        if pulled.objects > listed && pulled.objects < 60_000 {
            cut_short += 1;
        }
        listed = pulled.objects;
        assert!(c.verify()?.is_ok());
        c.close()?;
    }
    // The next push sends only what is still missing, and then everything is there.
    let a = open(dir.path(), "a.db", small_packs(server.remote("killed")))?;
    let done = a.remote().expect("a remote").push()?;
    assert_eq!(done.objects + done.already_remote, 60_000, "{done}");
    assert!(done.already_remote >= listed, "{done}");
    let b = open(dir.path(), "b.db", server.remote("killed"))?;
    let pulled = b.remote().expect("a remote").pull()?;
    assert_eq!(pulled.objects, 60_000, "{pulled}");
    assert!(b.missing(&keys)?.is_empty());
    eprintln!("10 kills, {cut_short} of them mid-push: {listed} objects listed after the last");
    // Every kill came after some of its push's packs were listed and before its push was
    // done: each left a listing that grew and is not complete.
    assert_eq!(killed_mid_push, 10, "a push finished before its kill");
    assert_eq!(cut_short, 10, "a kill mid-push left no new pack listed");
    Ok(())
}

#[test]
fn a_volume_server_of_two_stopped_mid_push() -> TestResult {
    let mut server = S3Server::cluster(1);
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("volumes"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let objects = crate::common::objects(6, 100_000);
    let keys = a.save_all(&objects)?;
    a.flush()?;
    // A volume server stops once the push has listed a few of its packs.
    let store = server.store();
    let during = std::thread::scope(|s| -> anyhow::Result<_> {
        let push = s.spawn(|| a.remote().expect("a remote").push());
        wait_for_packs(&store, "volumes", 3, || push.is_finished())?;
        server.stop_volume(0);
        Ok(push.join().unwrap())
    })?;
    eprintln!("push while a volume server stopped: {during:?}");
    assert!(matches!(during, Ok(_) | Err(Error::Remote { .. })), "{during:?}");
    // Whatever B can read now is right: pulls store only checked objects.
    let b = open(dir.path(), "b.db", remote.clone())?;
    let partial = b.remote().expect("a remote").pull();
    eprintln!("pull with a volume server stopped: {partial:?}");
    assert!(
        matches!(&partial, Ok(r) if r.damaged.is_empty())
            || matches!(partial, Err(Error::Remote { .. }))
    );
    assert!(b.verify()?.is_ok());
    for (key, object) in keys.iter().zip(&objects) {
        if b.contains(key)? {
            assert_eq!(b.get(key)?.as_deref(), Some(&object[..]));
        }
    }
    server.restart();
    let done = retry(|| a.remote().expect("a remote").push())?;
    assert_eq!(done.objects + done.already_remote, 100_000, "{done}");
    pull_until_complete(&b)?;
    assert!(b.missing(&keys)?.is_empty());
    Ok(())
}

/// Environment variable that makes `model_child` save a model and push it:
/// `<db>|<endpoint>|<prefix>`.
const MODEL_CHILD: &str = "OBJSTASH_TEST_MODEL_CHILD";

/// Saves model 8 (20,000 objects) into its own stash and pushes it, in a process of its
/// own, for `a_model_pushed_by_one_process_is_read_through_by_another`.
#[test]
#[ignore = "child process of a sharing test"]
fn model_child() -> TestResult {
    let Some((db, endpoint, prefix)) = child_spec(MODEL_CHILD) else { return Ok(()) };
    let stash =
        Stash::builder().remote(crate::common::s3::remote_at(&endpoint, &prefix)).open(&db)?;
    stash.save_all(&crate::common::objects(8, 20_000))?;
    let report = stash.remote().expect("a remote").push()?;
    anyhow::ensure!(report.objects == 20_000, "{report}");
    stash.close()?;
    Ok(())
}

#[test]
fn a_model_pushed_by_one_process_is_read_through_by_another() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let spec = format!("{}|{}|shared", dir.path().join("a.db").display(), server.endpoint());
    let status = crate::common::spawn_child("remote::model_child", MODEL_CHILD, spec)?.wait()?;
    assert!(status.success(), "the pushing process failed: {status}");
    // This process never saw the model: every object comes through the remote, checked.
    let objects = crate::common::objects(8, 20_000);
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    let b = open(dir.path(), "b.db", server.remote("shared"))?;
    assert_eq!(b.len()?, 0);
    for (key, object) in keys.iter().zip(&objects).take(100) {
        assert_eq!(b.get(key)?.as_deref(), Some(&object[..]));
    }
    for (chunk, objects) in keys.chunks(1_000).zip(objects.chunks(1_000)) {
        for (got, object) in b.get_many(chunk)?.into_iter().zip(objects) {
            assert_eq!(got.as_deref(), Some(&object[..]));
        }
    }
    b.flush()?;
    assert_eq!(b.len()?, 20_000);
    assert!(b.verify()?.is_ok());
    Ok(())
}

#[test]
fn write_behind_uploads_in_the_background_and_flush_remote_waits() -> TestResult {
    let mut server = S3Server::start();
    let dir = tempfile::tempdir()?;
    // Saved by an earlier session without a remote: the first round uploads them.
    let earlier = crate::common::objects(9, 1_000);
    let earlier_keys = {
        let a = Stash::open(dir.path().join("a.db"))?;
        let keys = a.save_all(&earlier)?;
        a.close()?;
        keys
    };
    let remote = server.remote("behind").write_behind(Duration::from_millis(200));
    let a = open(dir.path(), "a.db", remote)?;
    let objects = crate::common::objects(10, 5_000);
    let keys = a.save_all(&objects)?;
    a.remote().expect("a remote").flush()?;
    let b = open(dir.path(), "b.db", server.remote("behind"))?;
    assert_eq!(b.remote().expect("a remote").refresh()?.objects, 6_000);
    assert!(
        b.remote().expect("a remote").missing(&keys)?.is_empty()
            && b.remote().expect("a remote").missing(&earlier_keys)?.is_empty()
    );

    // The remote down: saves do not wait for it, flush_remote says it failed.
    server.stop();
    let more = crate::common::objects(11, 2_000);
    let started = Instant::now();
    let more_keys = a.save_all(&more)?;
    a.flush()?;
    let saving = started.elapsed();
    assert!(matches!(a.remote().expect("a remote").flush(), Err(Error::Remote { .. })));
    server.restart();
    // The next round (retried in the background, or hurried by this call) uploads them.
    let deadline = Instant::now() + RECOVERY;
    while let Err(e) = a.remote().expect("a remote").flush() {
        assert!(Instant::now() < deadline, "still failing: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    pull_until_complete(&b)?;
    assert!(b.missing(&more_keys)?.is_empty() && b.missing(&keys)?.is_empty());
    eprintln!("2,000 saves with the remote down took {saving:?}");
    a.close()?;
    Ok(())
}

#[test]
fn two_stashes_pushing_the_same_objects_at_once_write_the_same_packs() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let objects = crate::common::objects(12, 8_000);
    let remote = small_packs(server.remote("same"));
    // The same objects in the same storage order in both: one file, copied. (Saving them
    // one by one into each depended on timing: the writer sorts what arrives before each
    // commit, and a saver descheduled on a busy machine changed where commits fell.)
    let keys = {
        let source = Stash::open(dir.path().join("source.db"))?;
        let keys = source.save_all(&objects)?;
        source.close()?;
        keys
    };
    std::fs::copy(dir.path().join("source.db"), dir.path().join("a.db"))?;
    std::fs::copy(dir.path().join("source.db"), dir.path().join("b.db"))?;
    let a = open(dir.path(), "a.db", remote.clone())?;
    let b = open(dir.path(), "b.db", remote.clone())?;
    // Same objects in the same order: the same pack names and bytes. Whichever index
    // lands second finds the first there (a conditional put) and takes it as its own.
    let (ra, rb) = std::thread::scope(|s| {
        let pa = s.spawn(|| a.remote().expect("a remote").push());
        let pb = s.spawn(|| b.remote().expect("a remote").push());
        (pa.join().unwrap(), pb.join().unwrap())
    });
    let (ra, rb) = (ra?, rb?);
    let c = open(dir.path(), "c.db", remote)?;
    let status = c.remote().expect("a remote").refresh()?;
    assert_eq!(status.objects, 8_000, "{ra} / {rb}");
    assert!(status.packs <= ra.packs.max(rb.packs), "{status} after {ra} / {rb}");
    let pulled = c.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete() && pulled.objects == 8_000, "{pulled}");
    assert!(c.missing(&keys)?.is_empty());
    Ok(())
}

#[test]
fn a_chunked_object_goes_through_the_remote_as_its_chunks() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = server.remote("large").pack_size(4 << 20);
    let a = open(dir.path(), "a.db", remote.clone())?;
    let first = crate::common::noise(5, 20 << 20);
    let mut second = first.clone();
    second.splice(10 << 20..10 << 20, b"an edit".iter().copied());
    let (k1, k2) = (a.save_reader(&first[..])?, a.save_reader(&second[..])?);
    let small = a.save(b"a small object")?;
    let pushed = a.remote().expect("a remote").push()?;
    assert_eq!((pushed.objects, pushed.corrupt), (3, 0), "{pushed}");
    // The second version's shared chunks went once: the bodies hold about one copy.
    assert!(pushed.bytes < 24 << 20, "{pushed}");
    assert!(pushed.packs > 4, "chunks are spread over packs of 4 MiB: {pushed}");

    // Read through as a stream: stored in b in chunks, read back whole.
    let b = open(dir.path(), "b.db", remote.clone())?;
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut b.open_reader(&k1)?.expect("read through"), &mut read)?;
    assert!(read == first, "the object read through differs");
    assert!(b.stats()?.chunks > 1, "stored in chunks");
    assert_eq!(b.get(&small)?.as_deref(), Some(&b"a small object"[..]));
    assert!(b.verify()?.is_ok());

    // A pull takes the objects, not the chunks as objects of their own.
    let c = open(dir.path(), "c.db", remote)?;
    let pulled = c.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete(), "{pulled}");
    assert_eq!(c.len()?, 3, "{pulled}");
    assert_eq!(c.get(&k2)?.as_deref(), Some(&second[..]));
    let report = c.verify()?;
    assert!(report.is_ok() && report.pending_chunks == 0, "{report}");
    Ok(())
}

#[test]
fn a_damaged_chunk_on_the_remote_is_never_served_and_a_later_push_heals_it() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = server.remote("chunkdamage").pack_size(4 << 20);
    let a = open(dir.path(), "a.db", remote.clone())?;
    let object = crate::common::noise(6, 20 << 20);
    let key = a.save_reader(&object[..])?;
    a.remote().expect("a remote").push()?;
    // Flip a byte in the middle of every pack body: the chunks' and the manifest's.
    let store = server.store();
    let rt = tokio::runtime::Runtime::new()?;
    let mut bodies = rt.block_on(list(&store, "chunkdamage/packs"))?;
    bodies.sort();
    assert!(bodies.len() >= 4, "{bodies:?}");
    let b = open(dir.path(), "b.db", remote.clone())?;
    b.remote().expect("a remote").refresh()?;
    for victim in &bodies {
        rt.block_on(flip_middle_byte(&store, victim))?;
    }
    // Every pack damaged: the read-through fails with the remote's damage, stores nothing.
    let err = b.get(&key).expect_err("damaged chunks are never served");
    assert!(matches!(err, Error::RemoteCorrupt { .. }), "{err}");
    assert!(b.is_empty()?);
    let report = b.verify()?;
    assert!(report.is_ok() && report.pending_chunks == 0, "{report}");
    // Each damaged pack B meets leaves the listing with the manifest's; A pushes what the
    // remote no longer lists, and B, once it has met them all, reads the object whole.
    for _ in 0..bodies.len() {
        a.remote().expect("a remote").push()?;
        b.remote().expect("a remote").refresh()?;
        match b.get(&key) {
            Ok(Some(read)) => {
                assert!(read == object);
                return Ok(());
            }
            Ok(None) | Err(Error::RemoteCorrupt { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!("the remote never healed")
}

#[test]
fn names_travel_with_their_objects_and_are_read_through_by_name() -> TestResult {
    let server = S3Server::start();
    let dir = tempfile::tempdir()?;
    let remote = small_packs(server.remote("named"));
    let a = open(dir.path(), "a.db", remote.clone())?;
    let objects = crate::common::objects(8, 2_000);
    let names: Vec<String> = (0..objects.len()).map(|i| format!("speckle-id-{i:032x}")).collect();
    let items: Vec<(&str, &[u8])> =
        names.iter().map(String::as_str).zip(objects.iter().map(Vec::as_slice)).collect();
    a.save_named(&items)?;
    let pushed = a.remote().expect("a remote").push()?;
    assert_eq!((pushed.objects, pushed.names), (2_000, 2_000), "{pushed}");
    let again = a.remote().expect("a remote").push()?;
    assert_eq!((again.objects, again.names), (0, 0), "{again}");
    // The remote counts objects, not names.
    assert_eq!(a.remote().expect("a remote").refresh()?.objects, 2_000);

    // A machine that never saw them reads objects by name, one and many.
    let b = open(dir.path(), "b.db", remote.clone())?;
    assert_eq!(b.get_named(&[names[7].as_str()])?[0].as_deref(), Some(&objects[7][..]));
    let got = b.get_named(&names)?;
    assert!(got.iter().zip(&objects).all(|(g, o)| g.as_deref() == Some(&o[..])));
    assert_eq!(b.get_named(&["no-such-name"])?, vec![None]);
    // Read through once, then named here.
    assert!(b.resolve(&names)?.iter().all(Option::is_some));
    assert!(b.verify()?.is_ok());

    // A pull brings the names with the objects.
    let c = open(dir.path(), "c.db", remote)?;
    let pulled = c.remote().expect("a remote").pull()?;
    assert!(pulled.is_complete(), "{pulled}");
    assert_eq!((pulled.objects, pulled.names), (2_000, 2_000), "{pulled}");
    let resolved = c.resolve(&names)?;
    let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
    assert!(resolved.iter().zip(&keys).all(|(r, k)| *r == Some(*k)));
    Ok(())
}

/// Starts a child process pushing each of `dbs` to `prefix` (`push_child`), each running
/// once it has opened its stash.
pub(crate) fn start_pushes(
    server: &S3Server,
    dbs: &[std::path::PathBuf],
    prefix: &str,
) -> anyhow::Result<Vec<crate::common::Reaped>> {
    let mut children = Vec::new();
    for db in dbs {
        let spec = format!("{}|{}|{prefix}", db.display(), server.endpoint());
        let mut child = crate::common::spawn_child("remote::push_child", PUSH_CHILD, spec)?;
        crate::common::wait_until_open(db, &mut child)?;
        children.push(child);
    }
    Ok(children)
}

/// Waits for pushes `start_pushes` started; each must succeed.
pub(crate) fn finish_pushes(children: Vec<crate::common::Reaped>) -> TestResult {
    for child in children {
        let status = child.into_inner().wait()?;
        anyhow::ensure!(status.success(), "a push failed: {status}");
    }
    Ok(())
}

/// A machine reading random objects of `objects` through the remote in a thread of its own
/// (read-only, refreshing at every miss) until stopped: every object it gets must be
/// right, and a read must never fail; objects the remote does not hold are misses.
pub(crate) struct ReadingMachine {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    served: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl ReadingMachine {
    pub(crate) fn start(
        db: &Path,
        remote: RemoteConfig,
        objects: std::sync::Arc<Vec<Vec<u8>>>,
    ) -> anyhow::Result<ReadingMachine> {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        Stash::open(db)?.close()?;
        let stash = Stash::builder()
            .remote(remote.refresh_interval(Duration::ZERO))
            .read_only(true)
            .open(db)?;
        let keys: Vec<Key> = objects.iter().map(|o| Key::of(o)).collect();
        let (halt, count) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || -> anyhow::Result<()> {
            let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
            while !halt.load(Ordering::Relaxed) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let i = (seed % keys.len() as u64) as usize;
                if let Some(value) = stash.get(&keys[i])? {
                    anyhow::ensure!(value == objects[i], "object {i} came back wrong");
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        });
        Ok(ReadingMachine { stop, served, thread })
    }

    /// Goes on until it has served `more` objects more, then stops; what it served in all.
    pub(crate) fn stop_after(self, more: u64) -> anyhow::Result<u64> {
        use std::sync::atomic::Ordering;
        let target = self.served.load(Ordering::Relaxed) + more;
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.served.load(Ordering::Relaxed) < target && !self.thread.is_finished() {
            anyhow::ensure!(Instant::now() < deadline, "the reader stopped serving");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the reader panicked")?;
        Ok(self.served.load(Ordering::Relaxed))
    }
}
