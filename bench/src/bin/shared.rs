//! Many processes, one stash: what concurrent writers cost, and what readers in other
//! processes cost a writer.
//!
//! `cargo run --release -p objstash-bench --bin shared -- [--objects 100000] [--layout single|bucketed]
//!  [--durability fast|safe] [--reader-rate 10000]`
//!
//! Each figure is one run: N processes (this program, started again as children) each
//! generate their objects, wait for a common start, save them with `save_all` in chunks of
//! 10,000 and flush. The aggregate rate is all objects saved over the time from the start
//! to the last process's flush. Printed: 1, 2 and 4 processes saving distinct objects,
//! 4 processes saving the same objects (two connectors caching one model), and one writer
//! alone against one writer beside two processes reading with `get_many`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../examples/common/mod.rs"]
mod common;

use anyhow::{Context, Result};
use clap::Parser;
use objstash::{Durability, Key, Layout, Stash};
use rayon::prelude::*;

const CHUNK: usize = 10_000;

#[derive(Parser, Debug)]
struct Args {
    /// Objects each writing process saves.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    #[arg(long, default_value = "single")]
    layout: Layout,
    #[arg(long, default_value = "fast")]
    durability: Durability,
    /// Objects per second each reading process reads (in `get_many` calls of 1,000);
    /// 0 reads as fast as it can.
    #[arg(long, default_value_t = 10_000)]
    reader_rate: u64,
    /// Internal: run as a child (`save:DB:FIRST` or `read:DB`).
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(child) = &args.child {
        return run_child(&args, child);
    }
    let dir = tempfile::tempdir()?;
    println!(
        "{} objects per writing process, layout {}, durability {}",
        args.objects, args.layout, args.durability
    );
    println!("| processes | objects | seconds | aggregate objects/s | x one process |");
    println!("|---|---:|---:|---:|---:|");
    let mut one = 0.0;
    for (name, firsts) in [
        ("1 writer", vec![0]),
        ("2 writers, distinct objects", vec![0, 1]),
        ("4 writers, distinct objects", vec![0, 1, 2, 3]),
        ("4 writers, the same objects", vec![0, 0, 0, 0]),
    ] {
        let db = dir.path().join(format!("{}.db", name.replace([' ', ','], "-")));
        let (objects, secs) = writers(&args, &db, &firsts, 0)?;
        let rate = objects as f64 / secs;
        if one == 0.0 {
            one = rate;
        }
        println!("| {name} | {objects} | {secs:.2} | {rate:.0} | {:.2} |", rate / one);
    }
    // Readers beside a writer: the readers read a first model while the writer saves a
    // second one into the same stash.
    let db = dir.path().join("readers.db");
    writers(&args, &db, &[9], 0)?;
    let (objects, alone) = writers(&args, &db, &[1], 0)?;
    let (_, beside) = writers(&args, &db, &[2], 2)?;
    let pace = match args.reader_rate {
        0 => "as fast as they can".to_string(),
        rate => format!("{rate} objects/s each"),
    };
    println!(
        "\none writer alone: {:.0} objects/s; beside two processes reading {pace}: {:.0} \
         objects/s ({:.2}x)",
        objects as f64 / alone,
        objects as f64 / beside,
        alone / beside
    );
    Ok(())
}

/// Runs one writer per entry of `firsts` (which model each saves) and `readers` reading
/// processes; returns the objects the writers saved and the seconds they took together.
fn writers(args: &Args, db: &Path, firsts: &[u64], readers: usize) -> Result<(u64, f64)> {
    let go = db.with_extension("go");
    let _ = std::fs::remove_file(&go);
    let spawn = |spec: String| -> Result<Child> {
        Command::new(std::env::current_exe()?)
            .args(["--objects", &args.objects.to_string()])
            .args(["--reader-rate", &args.reader_rate.to_string()])
            .args(["--layout", args.layout.as_str(), "--durability", args.durability.as_str()])
            .args(["--child", &spec])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a child")
    };
    let mut reading = Vec::new();
    for _ in 0..readers {
        reading.push(spawn(format!("read:{}", db.display()))?);
    }
    let mut children = Vec::new();
    for first in firsts {
        children.push(spawn(format!("save:{}:{first}", db.display()))?);
    }
    // Children print "ready" once their objects are generated.
    for child in children.iter_mut().chain(reading.iter_mut()) {
        let mut line = String::new();
        let stdout = child.stdout.as_mut().context("piped")?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        anyhow::ensure!(line.trim() == "ready", "a child said {line:?}");
    }
    let start = Instant::now();
    std::fs::write(&go, b"go")?;
    for child in children {
        let status = child.wait_with_output()?.status;
        anyhow::ensure!(status.success(), "a writer failed: {status}");
    }
    let secs = start.elapsed().as_secs_f64();
    for mut reader in reading {
        reader.kill()?;
        reader.wait()?;
    }
    Ok((args.objects * firsts.len() as u64, secs))
}

fn run_child(args: &Args, spec: &str) -> Result<()> {
    let mut parts = spec.splitn(3, ':');
    let role = parts.next().unwrap_or_default();
    let db = PathBuf::from(parts.next().unwrap_or_default());
    let go = db.with_extension("go");
    let stash = Stash::builder().layout(args.layout).durability(args.durability).open(&db)?;
    match role {
        "save" => {
            let first: u64 = parts.next().unwrap_or("0").parse()?;
            let objects: Vec<Vec<u8>> = (0..args.objects)
                .into_par_iter()
                .map(|i| speckle_gen::object(100 + first, i))
                .collect();
            println!("ready");
            wait_for(&go);
            for chunk in objects.chunks(CHUNK) {
                stash.save_all(chunk)?;
            }
            stash.flush()?;
        }
        "read" => {
            let keys: Vec<Key> = (0..args.objects.min(100_000))
                .map(|i| Key::of(&speckle_gen::object(109, i)))
                .collect();
            println!("ready");
            wait_for(&go);
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let start = Instant::now();
            let mut read = 0u64;
            loop {
                if args.reader_rate > 0 {
                    let due = Duration::from_secs_f64(read as f64 / args.reader_rate as f64);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                read += 1_000;
                let batch = common::pick(&keys, 1_000, &mut x);
                stash.get_many(&batch)?;
            }
        }
        other => anyhow::bail!("unknown child role {other}"),
    }
    stash.close()?;
    Ok(())
}

fn wait_for(path: &Path) {
    while !path.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
}
