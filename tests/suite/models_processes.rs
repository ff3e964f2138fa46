//! Models across processes: a writer killed by SIGKILL at random moments while it saves,
//! declares, assembles, removes and evicts models, and a reader process beside a writer
//! that evicts. In every snapshot of every process, a root that can be read has its whole
//! model (`models::model_is_whole_or_absent`), and after every kill the stash verifies and
//! lists as complete exactly the models whose roots read.
//!
//! The child (this test binary run again with `OBJSTASH_MODELS_CHILD` set) saves model
//! after model into a capped stash with no grace period, each sharing a third of its
//! objects with the one before; every third model is assembled as a copy from a server does
//! it (hold what is stored, save the rest, then the root), every fourth it drops an
//! assembly half-way, every fifth it removes one member of an older model, and every
//! seventh it trims to half the cap. After each model's `flush` it appends the model's
//! number to a side file.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{Reaped, TestResult, sibling, wait_until_open};
use objstash::{Key, Stash};

const CHILD_ENV: &str = "OBJSTASH_MODELS_CHILD";
/// Objects a model lists besides its root.
const MEMBERS: u64 = 300;
const CAP: u64 = 3 << 20;

/// The members of model `n`: a third shared with model `n - 1`.
fn members(n: u64) -> Vec<Vec<u8>> {
    let shared = MEMBERS / 3;
    (0..MEMBERS)
        .map(|i| {
            if i < shared && n > 0 {
                speckle_gen::object(61, (n - 1) * MEMBERS + MEMBERS - shared + i)
            } else {
                speckle_gen::object(61, n * MEMBERS + i)
            }
        })
        .collect()
}

/// The root of model `n`, which lists its members.
fn root(n: u64) -> Vec<u8> {
    let ids: Vec<String> = members(n).iter().map(|m| Key::of(m).to_string()).collect();
    format!("{{\"model\":{n},\"__closure\":{ids:?}}}").into_bytes()
}

/// Whether model `n` reads whole (in one snapshot: one `get_many`); an error if its root
/// reads and a member does not, or anything reads wrong.
fn whole(stash: &Stash, n: u64) -> anyhow::Result<bool> {
    let members = self::members(n);
    let root = root(n);
    let keys: Vec<Key> =
        std::iter::once(Key::of(&root)).chain(members.iter().map(|m| Key::of(m))).collect();
    let read = stash.get_many(&keys)?;
    let Some(got) = &read[0] else { return Ok(false) };
    anyhow::ensure!(got == &root, "model {n}: the root reads wrong");
    for (i, (got, member)) in read[1..].iter().zip(&members).enumerate() {
        anyhow::ensure!(
            got.as_deref() == Some(&member[..]),
            "model {n}: its root reads but member {i} does not"
        );
    }
    Ok(true)
}

/// The child's loop; does nothing unless started by a test here.
#[test]
#[ignore = "run as a child process by the model process tests"]
fn models_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let [db, start] = spec.split('|').collect::<Vec<_>>()[..] else {
        anyhow::bail!("bad spec {spec}")
    };
    let db = PathBuf::from(db);
    let mut n: u64 = start.parse()?;
    let stash = Stash::builder().max_size(CAP).eviction_grace(Duration::ZERO).open(&db)?;
    let mut acked = OpenOptions::new().create(true).append(true).open(sibling(&db, ".acked"))?;
    writeln!(acked, "open")?;
    loop {
        let members = self::members(n);
        let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
        if n % 4 == 1 {
            // An assembly given up half-way: what it held goes back to being loose.
            let assembly = stash.assemble()?;
            assembly.save_all(&members[..MEMBERS as usize / 2])?;
            drop(assembly);
        }
        if n.is_multiple_of(3) {
            let assembly = stash.assemble()?;
            let missing = assembly.missing(&keys)?;
            let wanted: Vec<&Vec<u8>> =
                members.iter().filter(|m| missing.contains(&Key::of(m))).collect();
            assembly.save_all(&wanted)?;
            let root_key = assembly.save(&root(n))?;
            assembly.finish(&root_key, &keys)?;
        } else {
            stash.save_model(&root(n), &members)?;
        }
        if n % 5 == 4 && n > 2 {
            let older = self::members(n - 2);
            stash.remove(&Key::of(&older[(n % MEMBERS) as usize]))?;
        }
        if n % 7 == 6 {
            stash.trim_to(CAP / 2)?;
        }
        stash.flush()?;
        writeln!(acked, "{n}")?;
        n += 1;
    }
}

fn spawn_child(db: &Path, start: u64) -> std::io::Result<Reaped> {
    let spec = format!("{}|{start}", db.display());
    crate::common::spawn_child("models_processes::models_child", CHILD_ENV, spec)
}

/// The models the child acknowledged.
fn acknowledged(db: &Path) -> Vec<u64> {
    let text = fs::read_to_string(sibling(db, ".acked")).unwrap_or_default();
    text.lines().filter_map(|l| l.parse().ok()).collect()
}

/// Waits until the child has acknowledged `count` models.
fn wait_for(db: &Path, child: &mut std::process::Child, count: usize) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(180);
    while acknowledged(db).len() < count {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited early");
        anyhow::ensure!(Instant::now() < deadline, "the child acknowledged too little");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Models whose roots read are whole, the stash verifies, and the listing says complete
/// exactly for the models whose roots read.
fn check(stash: &Stash, models: std::ops::Range<u64>, what: &str) -> anyhow::Result<u64> {
    let report = stash.verify()?;
    anyhow::ensure!(report.is_ok(), "{what}: {report}");
    let listed = stash.models()?;
    let mut whole_models = 0;
    for n in models {
        let is_whole = whole(stash, n).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        whole_models += u64::from(is_whole);
        let root_key = Key::of(&root(n));
        if let Some(model) = listed.iter().find(|m| m.root == root_key) {
            anyhow::ensure!(
                model.complete() == is_whole,
                "{what}: model {n} is listed {} and its root {} read",
                if model.complete() { "complete" } else { "incomplete" },
                if is_whole { "does" } else { "does not" }
            );
        } else {
            anyhow::ensure!(!is_whole, "{what}: model {n} reads whole but is not listed");
        }
    }
    Ok(whole_models)
}

#[test]
fn a_writer_killed_at_random_moments_never_leaves_a_root_without_its_model() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("models.db");
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("models crash test seed {seed} (rerun with CRASH_SEED={seed})");
    let mut rng = seed;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut next = 0u64;
    let mut whole_seen = 0;
    for round in 0..8 {
        let _ = fs::remove_file(sibling(&db, ".acked"));
        let mut child = spawn_child(&db, next)?;
        wait_until_open(&db, &mut child)?;
        // Past a few models (the first child past a trim), then a random moment.
        wait_for(&db, &mut child, if round == 0 { 8 } else { 1 + below(4) as usize })?;
        std::thread::sleep(Duration::from_millis(below(150)));
        child.kill()?;
        child.wait()?;
        let acked = acknowledged(&db);
        // The model under way when the kill came may have been declared: check it too.
        let end = acked.last().map_or(next, |last| last + 2);
        // A writable open: alone, it gives up the assemblies of the killed child.
        let stash = Stash::open(&db)?;
        whole_seen += check(&stash, 0..end, &format!("round {round}"))?;
        let newest = acked.last().copied();
        if let Some(newest) = newest {
            anyhow::ensure!(
                whole(&stash, newest)?
                    || stash.model(&Key::of(&root(newest)))?.is_some_and(|m| !m.complete()),
                "round {round}: the newest acknowledged model {newest} went whole and unlisted"
            );
        }
        stash.close()?;
        next = end;
    }
    anyhow::ensure!(whole_seen > 0, "no model was ever whole: nothing was checked");
    Ok(())
}

#[test]
fn a_reader_process_beside_an_evicting_writer_sees_models_whole_or_absent() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("models.db");
    let mut child = spawn_child(&db, 0)?;
    wait_until_open(&db, &mut child)?;
    let reader = Stash::builder().read_only(true).open(&db)?;
    let (mut reads, mut whole_reads) = (0u64, 0u64);
    // Until the writer has saved 24 models (and evicted many), read every model it
    // acknowledged, again and again.
    while acknowledged(&db).len() < 24 {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited early");
        for n in acknowledged(&db) {
            reads += 1;
            whole_reads += u64::from(whole(&reader, n)?);
        }
    }
    child.kill()?;
    child.wait()?;
    anyhow::ensure!(whole_reads > 0 && whole_reads < reads, "{whole_reads} of {reads} whole");
    Ok(())
}
