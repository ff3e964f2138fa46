//! The main job: write a million realistic CAD/BIM objects into a fresh stash and report
//! speed, memory and sizes, beside what gzipping the same objects as one stream gives.
//!
//! `cargo run --release --example million -- [--count N] [--layout single|bucketed]
//!  [--durability fast|safe] [--path P] [--keep] [--seed S] [--level L]`

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use common::peak_memory;

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use objstash::{Durability, Layout, Stash, human};
use rayon::prelude::*;

/// Objects generated and saved per `save_all` call: bounds the example's own memory.
const CHUNK: u64 = 10_000;

#[derive(Parser, Debug)]
#[command(about = "Save N generated Speckle objects into a fresh stash and report the figures")]
struct Args {
    /// How many objects to write.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Table layout: single or bucketed.
    #[arg(long, default_value = "single")]
    layout: Layout,
    /// Durability: fast or safe.
    #[arg(long, default_value = "fast")]
    durability: Durability,
    /// Database file (default: in a temporary directory removed at exit).
    #[arg(long)]
    path: Option<PathBuf>,
    /// Keep the temporary directory.
    #[arg(long)]
    keep: bool,
    /// Seed of the generated model.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// gzip level, 0 to 9.
    #[arg(long, default_value_t = 2)]
    level: u32,
    /// Rows per writer transaction (default: the library's).
    #[arg(long)]
    batch_size: Option<usize>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let path = args.path.clone().unwrap_or_else(|| temp.path().join("million.db"));
    let mut builder = Stash::builder();
    if let Some(batch_size) = args.batch_size {
        builder = builder.batch_size(batch_size);
    }
    let stash = builder
        .layout(args.layout)
        .durability(args.durability)
        .compression_level(args.level)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let already = stash.len()?;
    println!(
        "writing {} objects into {} (layout {}, durability {}, gzip level {}{})",
        args.count,
        path.display(),
        args.layout,
        args.durability,
        args.level,
        if already > 0 { format!(", {already} objects already there") } else { String::new() }
    );

    let bar = if std::io::stdout().is_terminal() {
        let bar = ProgressBar::new(args.count);
        bar.set_style(ProgressStyle::with_template(
            "{bar:40} {pos}/{len} objects, {per_sec}, eta {eta}",
        )?);
        bar
    } else {
        ProgressBar::hidden()
    };

    let start = Instant::now();
    let mut generating = Duration::ZERO;
    let mut raw_bytes = 0u64;
    let mut next = 0u64;
    while next < args.count {
        let n = CHUNK.min(args.count - next);
        let t = Instant::now();
        let chunk: Vec<Vec<u8>> =
            (next..next + n).into_par_iter().map(|i| speckle_gen::object(args.seed, i)).collect();
        generating += t.elapsed();
        raw_bytes += chunk.iter().map(|o| o.len() as u64).sum::<u64>();
        stash.save_all(&chunk)?;
        next += n;
        bar.set_position(next);
    }
    stash.flush()?;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let saving = elapsed.saturating_sub(generating);

    let stats = stash.stats()?;
    let whole_start = Instant::now();
    let whole = whole_stream_gzip(args.seed, args.count, args.level)?;
    let whole_time = whole_start.elapsed();

    let secs = elapsed.as_secs_f64();
    println!();
    println!(
        "elapsed            {secs:>10.2} s  (generating {:.2} s, saving {:.2} s)",
        generating.as_secs_f64(),
        saving.as_secs_f64()
    );
    println!(
        "rate               {:>10.0} objects/s overall, {:.0} objects/s saving",
        args.count as f64 / secs,
        args.count as f64 / saving.as_secs_f64()
    );
    println!(
        "raw throughput     {:>10.1} MB/s overall, {:.1} MB/s saving",
        raw_bytes as f64 / 1e6 / secs,
        raw_bytes as f64 / 1e6 / saving.as_secs_f64()
    );
    println!("peak memory        {:>10}", peak_memory().map_or("unknown".to_string(), human));
    println!();
    println!("{stats}");
    println!();
    println!(
        "for comparison, the same {} objects gzipped as one stream at level {}:",
        args.count, args.level
    );
    println!(
        "whole-stream gzip  {:>16}  {:>10}  ratio {:.2}  ({:.1} s)",
        whole,
        human(whole),
        raw_bytes as f64 / whole as f64,
        whole_time.as_secs_f64()
    );
    println!(
        "per-object gzip costs {:.2}x the bytes of whole-stream gzip; the database file {:.2}x",
        stats.stored_bytes as f64 / whole as f64,
        stats.file_bytes as f64 / whole as f64
    );
    stash.close()?;
    if args.keep && args.path.is_none() {
        let kept = temp.keep();
        println!("kept {}", kept.display());
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// Size of the objects gzipped as one stream, computed as parallel gzip members of 10,000
/// objects (12 MB each): a deflate window is 32 KB, so the split costs nothing measurable.
fn whole_stream_gzip(seed: u64, count: u64, level: u32) -> Result<u64> {
    let starts: Vec<u64> = (0..count).step_by(CHUNK as usize).collect();
    starts
        .par_iter()
        .map(|&start| {
            let mut gz = flate2::write::GzEncoder::new(Counter(0), flate2::Compression::new(level));
            for i in start..(start + CHUNK).min(count) {
                gz.write_all(&speckle_gen::object(seed, i))?;
            }
            Ok(gz.finish()?.0)
        })
        .sum()
}

/// A sink that only counts bytes.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
