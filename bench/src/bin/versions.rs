//! Version histories: models that share most of their objects with the version before, as
//! a Speckle project's versions do, and what trimming, removing and declaring them costs,
//! with another process saving beside them.
//!
//! `cargo run --release -p objstash-bench --bin versions -- [--versions 60] [--objects 5000]
//! [--shared 0.9]`
//!
//! Builds a stash of `--versions` models of `--objects` generated objects each, every
//! version sharing `--shared` of its objects with the one before (saved with `save_model`,
//! oldest first). Then, while a child process (this binary again, `--saver`) saves one
//! object at a time into the same stash and records how long each save and flush waited:
//! - `trim_to` half of the stored bytes;
//! - `remove_model` of the newest version left;
//! - `remove` of 1,000 members of the oldest version left, in one call.
//!
//! Prints each step's time and the child's longest wait during it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use objstash::{Key, Stash};

#[derive(Parser, Debug)]
struct Args {
    /// Versions saved.
    #[arg(long, default_value_t = 60)]
    versions: u64,
    /// Objects a version lists besides its root.
    #[arg(long, default_value_t = 5_000)]
    objects: u64,
    /// The share of a version's objects that the version before has too.
    #[arg(long, default_value_t = 0.9)]
    shared: f64,
    /// Where the stash is made.
    #[arg(long, default_value = "target/bench-versions")]
    dir: PathBuf,
    /// Run as the saving child on this stash (internal).
    #[arg(long, hide = true)]
    saver: Option<PathBuf>,
}

/// The object ids of version `v`: a sliding window, so that each version shares
/// `shared` of its objects with the one before.
fn ids(v: u64, objects: u64, shared: f64) -> std::ops::Range<u64> {
    let step = ((1.0 - shared) * objects as f64).round().max(1.0) as u64;
    v * step..v * step + objects
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.saver {
        return saver(path);
    }
    std::fs::create_dir_all(&args.dir)?;
    let path = args.dir.join("versions.db");
    for suffix in ["", "-wal", "-shm", "-lock", "-open"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(&path)?;
    let started = Instant::now();
    let mut roots = Vec::new();
    for v in 0..args.versions {
        let members: Vec<Vec<u8>> =
            ids(v, args.objects, args.shared).map(|i| speckle_gen::object(77, i)).collect();
        let keys: Vec<String> = members.iter().map(|m| Key::of(m).to_string()).collect();
        let root = format!("{{\"version\":{v},\"__closure\":{keys:?}}}").into_bytes();
        let model = stash.save_model(&root, &members)?;
        anyhow::ensure!(model.complete(), "version {v}: {model}");
        roots.push(model.root);
    }
    stash.flush()?;
    let stats = stash.stats()?;
    println!(
        "{} versions of {} objects sharing {:.0}%: {} objects, {:.1} MiB stored, saved in {:.1} s",
        args.versions,
        args.objects,
        args.shared * 100.0,
        stats.objects,
        stats.stored_bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );

    let mut child = Command::new(std::env::current_exe()?)
        .arg("--saver")
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_child = child.stdin.take().context("the child's stdin")?;
    let mut from_child = BufReader::new(child.stdout.take().context("the child's stdout")?);
    let mut line = String::new();
    from_child.read_line(&mut line)?;
    anyhow::ensure!(line.trim() == "ready", "the saver said {line:?}");

    let mut step = |name: &str, work: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        writeln!(to_child, "reset")?;
        line.clear();
        from_child.read_line(&mut line)?;
        let at = Instant::now();
        work()?;
        let took = at.elapsed();
        writeln!(to_child, "report")?;
        line.clear();
        from_child.read_line(&mut line)?;
        println!(
            "{name}: {:.2} s; the other process's longest save: {} ms",
            took.as_secs_f64(),
            line.trim()
        );
        Ok(())
    };
    let half = stash.stats()?.stored_bytes / 2;
    step("trim_to(half)", &mut || {
        let evicted = stash.trim_to(half)?;
        println!("  {evicted}");
        Ok(())
    })?;
    let models = stash.models()?;
    let newest = models.last().context("a model is left")?.root;
    step("remove_model(newest)", &mut || {
        anyhow::ensure!(stash.remove_model(&newest)?, "removed");
        Ok(())
    })?;
    let oldest = stash.models()?.first().context("a model is left")?.root;
    let members: Vec<Key> = stash
        .read_model(&oldest)?
        .context("the oldest model reads")?
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| *k != oldest)
        .take(1_000)
        .collect();
    step("remove(1,000 members)", &mut || {
        stash.remove_all(&members)?;
        stash.flush()?;
        Ok(())
    })?;
    writeln!(to_child, "stop")?;
    child.wait()?;
    stash.close()?;
    Ok(())
}

/// The child: saves a new object and flushes, over and over, and reports its longest wait
/// since the last `reset` when asked (`report`), until `stop`.
fn saver(path: &Path) -> Result<()> {
    let stash = Stash::open(path)?;
    let longest = std::sync::Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let (longest, stop) = (longest.clone(), stop.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let at = Instant::now();
                stash.save(
                    format!("a save beside the trim, {n}, {:?}", Instant::now()).as_bytes(),
                )?;
                stash.flush()?;
                let took = at.elapsed();
                let mut longest = longest.lock().unwrap_or_else(|p| p.into_inner());
                *longest = (*longest).max(took);
            }
            stash.close()?;
            Ok(())
        })
    };
    println!("ready");
    std::io::stdout().flush()?;
    for command in std::io::stdin().lock().lines() {
        let command = command?;
        let mut longest = longest.lock().unwrap_or_else(|p| p.into_inner());
        match command.as_str() {
            "reset" => {
                *longest = Duration::ZERO;
                println!("ok");
            }
            "report" => println!("{}", longest.as_millis()),
            _ => break,
        }
        std::io::stdout().flush()?;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    worker.join().map_err(|_| anyhow::anyhow!("the saver panicked"))??;
    Ok(())
}
