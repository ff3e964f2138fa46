//! The scale curve: write 10,000,000 objects in steps of 1,000,000 and print, per step, the
//! save rate of that step, the file size and the process's peak memory, for both layouts.
//!
//! `cargo run --release -p objstash-bench --bin scale -- [--steps 10] [--step 1000000] [--csv FILE]
//!  [--layout single|bucketed] [--channel N]`
//!
//! Generation is done before each chunk is saved and left out of the step's time, so the
//! rate is what `save_all` plus the final commit of the step cost.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "../../../examples/common/mod.rs"]
mod common;

use common::peak_memory;

use anyhow::Result;
use clap::Parser;
use objstash::{Layout, Stash};
use rayon::prelude::*;

const CHUNK: u64 = 10_000;

#[derive(Parser, Debug)]
struct Args {
    /// Steps per layout.
    #[arg(long, default_value_t = 10)]
    steps: u64,
    /// Objects per step.
    #[arg(long, default_value_t = 1_000_000)]
    step: u64,
    /// Write rows `layout,step,objects,rate,file_bytes,peak_bytes` to this CSV file (a run of
    /// both layouts replaces it; a run of one layout appends to it).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Only this layout, in this process (default: both, each in a child process of its
    /// own, so one layout's peak memory is not carried into the other's).
    #[arg(long)]
    layout: Option<Layout>,
    /// Leave out the table header (used by the per-layout child processes).
    #[arg(long, hide = true)]
    no_header: bool,
    /// Capacity of the channel to the writer, in objects (default: the library's).
    #[arg(long)]
    channel: Option<usize>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let Some(layout) = args.layout else {
        println!(
            "| layout | step | objects | step rate (objects/s) | file (MB) | peak memory (MB) |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        // The file holds this run's curve alone: each layout's process appends its rows.
        if let Some(path) = &args.csv {
            std::fs::File::create(path)?;
        }
        for layout in [Layout::Single, Layout::Bucketed] {
            let status = std::process::Command::new(std::env::current_exe()?)
                .args(std::env::args_os().skip(1))
                .args(["--layout", layout.as_str(), "--no-header"])
                .status()?;
            anyhow::ensure!(status.success(), "the {layout} run failed: {status}");
        }
        return Ok(());
    };
    run(&args, layout)
}

fn run(args: &Args, layout: Layout) -> Result<()> {
    let mut csv = match &args.csv {
        Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        None => None,
    };
    if !args.no_header {
        println!(
            "| layout | step | objects | step rate (objects/s) | file (MB) | peak memory (MB) |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
    }
    {
        let dir = tempfile::tempdir()?;
        let mut builder = Stash::builder().layout(layout);
        if let Some(capacity) = args.channel {
            builder = builder.channel_capacity(capacity);
        }
        let stash = builder.open(dir.path().join("scale.db"))?;
        let mut next = 0u64;
        for step in 1..=args.steps {
            let end = next + args.step;
            let mut saving = Duration::ZERO;
            while next < end {
                let n = CHUNK.min(end - next);
                let chunk: Vec<Vec<u8>> =
                    (next..next + n).into_par_iter().map(|i| speckle_gen::object(3, i)).collect();
                let start = Instant::now();
                stash.save_all(&chunk)?;
                saving += start.elapsed();
                next += n;
            }
            let start = Instant::now();
            stash.flush()?;
            saving += start.elapsed();
            let rate = args.step as f64 / saving.as_secs_f64();
            let file = stash.stats()?.file_bytes;
            let peak = peak_memory().unwrap_or(0);
            println!(
                "| {layout} | {step} | {next} | {rate:.0} | {:.0} | {:.0} |",
                file as f64 / 1e6,
                peak as f64 / 1e6
            );
            if let Some(csv) = &mut csv {
                writeln!(csv, "{layout},{step},{next},{rate:.0},{file},{peak}")?;
            }
        }
        stash.close()?;
    }
    Ok(())
}
