//! The memory a large model's read takes: `read_model` (the whole model at once) against
//! `model_reader` (a stream, a chunk at a time).
//!
//! `cargo run --release -p objstash-bench --bin model_memory -- [--members 1000000]`
//!
//! Builds (once, under `--dir`) a stash of one model of `--members` generated Speckle
//! objects, then reads it in a child process per way (this binary again, `--read`), each
//! printing its peak resident memory (`VmHWM`) after opening the stash and after the read.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use objstash::{Key, Stash};

#[derive(Parser, Debug)]
struct Args {
    /// Objects the model lists besides its root.
    #[arg(long, default_value_t = 1_000_000)]
    members: u64,
    /// Where the stash is made (kept between runs of the same size).
    #[arg(long, default_value = "target/bench-model-memory")]
    dir: PathBuf,
    /// Read the model in this child process (internal): `full` or `stream`.
    #[arg(long, hide = true)]
    read: Option<String>,
}

/// The peak resident memory of this process, in bytes.
fn peak() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("VmHWM")?;
    let kib: u64 = line.split_whitespace().nth(1).context("a figure")?.parse()?;
    Ok(kib * 1024)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let path = args.dir.join(format!("model-{}.db", args.members));
    let root_path = args.dir.join(format!("model-{}.root", args.members));
    if let Some(way) = &args.read {
        let root: Key = std::fs::read_to_string(&root_path)?.trim().parse()?;
        let stash = Stash::open(&path)?;
        let opened = peak()?;
        let at = Instant::now();
        let (objects, bytes) = match way.as_str() {
            "full" => {
                let read = stash.read_model(&root)?.context("complete")?;
                (read.len(), read.iter().map(|(_, b)| b.len()).sum::<usize>())
            }
            _ => {
                let (mut objects, mut bytes) = (0, 0);
                for object in stash.model_reader(&root)?.context("complete")? {
                    objects += 1;
                    bytes += object?.1.len();
                }
                (objects, bytes)
            }
        };
        let took = at.elapsed();
        println!(
            "{way}: {objects} objects, {:.0} MiB, {:.2} s, peak {:.0} MiB above the open",
            bytes as f64 / (1 << 20) as f64,
            took.as_secs_f64(),
            (peak()? - opened) as f64 / (1 << 20) as f64
        );
        return Ok(());
    }
    if !root_path.exists() {
        std::fs::create_dir_all(&args.dir)?;
        let stash = Stash::open(&path)?;
        let assembly = stash.assemble()?;
        let mut keys = Vec::with_capacity(args.members as usize);
        let mut at = 0;
        while at < args.members {
            let n = (args.members - at).min(50_000) as usize;
            keys.extend(assembly.save_all(&speckle_gen::objects(5, at, n))?);
            at += n as u64;
        }
        let root = assembly.save(b"{\"root\":\"a model of many members\"}")?;
        let model = assembly.finish(&root, &keys)?;
        anyhow::ensure!(model.complete(), "{model}");
        stash.close()?;
        std::fs::write(&root_path, root.to_string())?;
    }
    for way in ["full", "stream"] {
        let status = Command::new(std::env::current_exe()?)
            .args(["--members", &args.members.to_string(), "--read", way, "--dir"])
            .arg(&args.dir)
            .status()?;
        anyhow::ensure!(status.success(), "the {way} read failed");
    }
    Ok(())
}
