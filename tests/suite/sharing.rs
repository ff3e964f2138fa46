//! Many processes, one stash: real child processes (this test binary run again with an
//! environment variable naming their part) saving and reading the same file at once,
//! killed with SIGKILL, and stopped with SIGSTOP in the middle of a write transaction.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{LAYOUTS, MODES, Reaped, TestResult, sibling};
use objstash::{Codec, Durability, Error, Key, Layout, Stash, StashBuilder};

const CHILD_ENV: &str = "OBJSTASH_SHARING_CHILD";
/// Objects each saver saves between flushes.
const FLUSH_EVERY: u64 = 200;

fn object(index: u64) -> Vec<u8> {
    speckle_gen::object(91, index)
}

/// What a child does, as `ROLE|DB|DURABILITY|LAYOUT|CODEC|ARG`.
#[test]
#[ignore = "run as a child process by the sharing tests"]
fn sharing_child() -> TestResult {
    let Some(spec) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let spec = spec.into_string().map_err(|_| anyhow::anyhow!("spec is not UTF-8"))?;
    let parts: Vec<&str> = spec.split('|').collect();
    let [role, db, durability, layout, codec, arg] = parts[..] else {
        anyhow::bail!("bad spec {spec}")
    };
    let db = PathBuf::from(db);
    let durability: Durability = durability.parse()?;
    let layout: Layout = layout.parse()?;
    let arg: u64 = arg.parse()?;
    let stash = builder(durability, layout, codec.parse()?).open(&db)?;
    match role {
        "saver" => saver(&stash, &db, arg),
        "holder" => holder(&db),
        other => anyhow::bail!("unknown role {other}"),
    }
}

/// Saves objects `start..` forever (alternating `save_all` and `save`), flushing every
/// [`FLUSH_EVERY`] and appending each acknowledged range to `<db>.acked-<start>` once the
/// flush returned; between flushes, reads back a random earlier range of every saver
/// (its own and the others') and checks the bytes. Prints `ERROR` and exits on any error.
fn saver(stash: &Stash, db: &Path, start: u64) -> TestResult {
    let mut acked = OpenOptions::new()
        .create(true)
        .append(true)
        .open(sibling(db, &format!(".acked-{start}")))?;
    writeln!(acked, "open")?;
    let mut i = start;
    let mut round = 0u64;
    loop {
        let batch: Vec<Vec<u8>> = (i..i + FLUSH_EVERY).map(object).collect();
        let result = (|| -> objstash::Result<()> {
            if round.is_multiple_of(2) {
                stash.save_all(&batch)?;
            } else {
                for o in &batch {
                    stash.save(o)?;
                }
            }
            // Overlapping objects: every saver also saves the same shared ones.
            stash.save_all(&(0..50).map(|k| object(k + round % 20 * 50)).collect::<Vec<_>>())?;
            stash.flush()
        })();
        if let Err(e) = result {
            println!("ERROR {e}");
            return Err(e.into());
        }
        writeln!(acked, "{i} {}", i + FLUSH_EVERY)?;
        for (a, b) in acknowledged_all(db).into_iter().take(8) {
            let keys: Vec<Key> = (a..b).map(|k| Key::of(&object(k))).collect();
            match stash.get_many(&keys) {
                Ok(found) => {
                    for (k, value) in (a..b).zip(found) {
                        if value.as_deref() != Some(&object(k)[..]) {
                            println!(
                                "ERROR object {k} acknowledged but read as {:?}",
                                value.map(|v| v.len())
                            );
                            anyhow::bail!("lost {k}");
                        }
                    }
                }
                Err(e) => {
                    println!("ERROR {e}");
                    return Err(e.into());
                }
            }
        }
        i += FLUSH_EVERY;
        round += 1;
    }
}

/// Holds the write lock through a raw SQLite transaction until a line arrives on stdin
/// (the parent stops this process meanwhile), then commits and closes.
fn holder(db: &Path) -> TestResult {
    let conn = rusqlite::Connection::open(db)?;
    conn.execute_batch(
        "BEGIN IMMEDIATE; UPDATE objstash_meta SET value = value WHERE name = 'codec';",
    )?;
    println!("HOLDING");
    std::io::stdout().flush()?;
    std::io::stdin().read_line(&mut String::new())?;
    conn.execute_batch("COMMIT")?;
    println!("COMMITTED");
    Ok(())
}

/// Every range acknowledged by any saver of `db` so far.
fn acknowledged_all(db: &Path) -> Vec<(u64, u64)> {
    let dir = db.parent().expect("a directory");
    let prefix = format!("{}.acked-", db.file_name().expect("a name").to_string_lossy());
    let mut ranges = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        for line in fs::read_to_string(entry.path()).unwrap_or_default().lines() {
            let mut words = line.split_whitespace();
            if let (Some(a), Some(b)) = (words.next(), words.next())
                && let (Ok(a), Ok(b)) = (a.parse(), b.parse())
            {
                ranges.push((a, b));
            }
        }
    }
    ranges
}

/// The settings of every handle of a sharing test. With zstd-dict each saver trains from
/// its first 64 KiB of objects unless another has stored a dictionary by then. The young
/// key index holds 1,000 keys, so the processes' writers move it while the others save and
/// read.
fn builder(durability: Durability, layout: Layout, codec: Codec) -> StashBuilder {
    Stash::builder()
        .durability(durability)
        .layout(layout)
        .codec(codec)
        .dictionary_sample(64 << 10)
        .young_keys(1_000)
}

fn spawn(
    role: &str,
    db: &Path,
    (durability, layout, codec): (Durability, Layout, Codec),
    arg: u64,
) -> std::io::Result<Reaped> {
    Command::new(std::env::current_exe()?)
        .args(["sharing::sharing_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{role}|{}|{durability}|{layout}|{codec}|{arg}", db.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped::new)
}

/// Waits until a saver child has opened the stash and acknowledged at least `ranges`
/// ranges.
fn wait_until_saving(db: &Path, start: u64, child: &mut Child, ranges: usize) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(120);
    let path = sibling(db, &format!(".acked-{start}"));
    while fs::read_to_string(&path).unwrap_or_default().lines().count() < ranges + 1 {
        if let Some(status) = child.try_wait()? {
            let mut said = String::new();
            if let Some(mut out) = child.stdout.take() {
                std::io::Read::read_to_string(&mut out, &mut said)?;
            }
            anyhow::bail!("saver {start} exited early with {status}: {said}");
        }
        anyhow::ensure!(Instant::now() < deadline, "saver {start} did not start saving");
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Kills a child and returns what it printed.
fn stop(mut child: Reaped) -> anyhow::Result<String> {
    child.kill()?;
    let child = child.into_inner();
    let out = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// After every process is gone: every acknowledged object is there, bytes right, and the
/// stash verifies (which compares the recorded totals with a recount).
fn check_everything(
    db: &Path,
    (durability, layout, codec): (Durability, Layout, Codec),
) -> anyhow::Result<u64> {
    let stash = builder(durability, layout, codec).open(db)?;
    let ranges = acknowledged_all(db);
    let keys: Vec<Key> =
        ranges.iter().flat_map(|&(a, b)| a..b).map(|k| Key::of(&object(k))).collect();
    let missing = stash.missing(&keys)?;
    anyhow::ensure!(
        missing.is_empty(),
        "{durability} {layout}: {} acknowledged objects lost",
        missing.len()
    );
    for (value, key) in stash.get_many(&keys)?.iter().zip(&keys) {
        anyhow::ensure!(value.as_deref().map(Key::of) == Some(*key), "wrong bytes for {key}");
    }
    let report = stash.verify()?;
    anyhow::ensure!(report.is_ok(), "{durability} {layout}: {report}");
    stash.close()?;
    Ok(keys.len() as u64)
}

/// Three processes save distinct and shared objects into one stash at once and read back
/// each other's acknowledged objects while they go on, in both modes, both layouts and
/// both codecs (with zstd-dict, each reads rows of dictionaries the others trained after
/// it opened).
#[test]
fn three_processes_save_and_read_one_stash() -> TestResult {
    for codec in [Codec::Gzip, Codec::ZstdDict] {
        for durability in MODES {
            for layout in LAYOUTS {
                let settings = (durability, layout, codec);
                let what = format!("{durability} {layout} {codec}");
                let dir = tempfile::tempdir()?;
                let db = dir.path().join("shared.db");
                let starts = [1_000_000u64, 2_000_000, 3_000_000];
                let mut children = Vec::new();
                for start in starts {
                    children.push((start, spawn("saver", &db, settings, start)?));
                }
                // Each saver has acknowledged a few ranges and read the others'.
                for (start, child) in &mut children {
                    wait_until_saving(&db, *start, child, 6)?;
                }
                for (start, child) in children {
                    let out = stop(child)?;
                    assert!(!out.contains("ERROR"), "{what} saver {start}: {out}");
                }
                let checked = check_everything(&db, settings)?;
                assert!(checked >= 3 * 5 * FLUSH_EVERY, "{what}: only {checked} acknowledged");
            }
        }
    }
    Ok(())
}

fn seed() -> u64 {
    let seed =
        std::env::var("SHARING_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
        });
    eprintln!("sharing test seed {seed} (rerun with SHARING_SEED={seed})");
    seed
}

/// Two savers go on while a third is killed with SIGKILL at random moments, 20 times per
/// mode: the survivors never see an error and never read wrong bytes; nothing that any
/// process acknowledged is lost (a killed process cannot damage a WAL database), and the
/// stash verifies after all are gone.
#[test]
fn killing_one_writer_leaves_the_others_and_the_stash_sound() -> TestResult {
    let mut rng = seed();
    for durability in MODES {
        let settings = (durability, Layout::Bucketed, Codec::Gzip);
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("kills.db");
        let mut steady = Vec::new();
        for start in [1_000_000u64, 2_000_000] {
            let mut child = spawn("saver", &db, settings, start)?;
            wait_until_saving(&db, start, &mut child, 1)?;
            steady.push((start, child));
        }
        for round in 0..20u64 {
            let start = 10_000_000 + round * 100_000;
            let mut victim = spawn("saver", &db, settings, start)?;
            wait_until_saving(&db, start, &mut victim, 1)?;
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            std::thread::sleep(Duration::from_millis(rng % 300));
            victim.kill()?;
            victim.wait()?;
            for (start, child) in &mut steady {
                assert!(
                    child.try_wait()?.is_none(),
                    "{durability}: saver {start} stopped at round {round}"
                );
            }
        }
        for (start, child) in steady {
            let out = stop(child)?;
            assert!(!out.contains("ERROR"), "{durability} saver {start}: {out}");
        }
        check_everything(&db, settings)?;
    }
    Ok(())
}

/// A process stopped with SIGSTOP in the middle of a write transaction: the others still
/// save (queued) and read, a flush waits up to the busy timeout and then says `Busy`,
/// losing nothing; after SIGCONT the stopped process commits (when told to: it holds the
/// lock until then, however slow the machine) and every flush succeeds.
#[test]
fn a_stopped_writer_delays_flushes_up_to_the_limit_and_loses_nothing() -> TestResult {
    for durability in MODES {
        let layout = Layout::Single;
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("stopped.db");
        let stash = Stash::builder()
            .durability(durability)
            .layout(layout)
            .busy_timeout(Duration::from_millis(800))
            .open(&db)?;
        let before = stash.save_all(&(0..500).map(object).collect::<Vec<_>>())?;
        stash.flush()?;
        let mut holder = spawn("holder", &db, (durability, layout, Codec::Gzip), 0)?;
        let mut stdout = holder.stdout.take().expect("piped");
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&seen).contains("HOLDING") {
            let mut byte = [0u8; 1];
            std::io::Read::read_exact(&mut stdout, &mut byte)?;
            seen.push(byte[0]);
            assert!(Instant::now() < deadline, "the holder never took the lock");
        }
        let pid = holder.id().to_string();
        assert!(Command::new("kill").args(["-STOP", &pid]).status()?.success());

        let start = Instant::now();
        let keys = stash.save_all(&(500..900).map(object).collect::<Vec<_>>())?;
        assert!(stash.missing(&before)?.is_empty());
        assert_eq!(stash.get(&keys[10])?.as_deref(), Some(&object(510)[..]));
        let err = stash.flush().unwrap_err();
        assert!(matches!(err, Error::Busy { .. }), "{durability}: {err:?}");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(800), "{durability}: waited only {waited:?}");
        assert_eq!(
            stash.get_many(&keys)?.iter().flatten().count(),
            400,
            "queued objects stay readable"
        );

        assert!(Command::new("kill").args(["-CONT", &pid]).status()?.success());
        writeln!(holder.stdin.take().expect("piped"), "commit")?;
        let status = holder.wait()?;
        assert!(status.success(), "{durability}: the holder failed after SIGCONT: {status}");
        stash.flush()?;
        assert_eq!(stash.len()?, 900);
        assert!(stash.verify()?.is_ok());
        stash.close()?;
        assert_eq!(Stash::open(&db)?.len()?, 900);
    }
    Ok(())
}
