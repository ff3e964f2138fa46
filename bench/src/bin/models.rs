//! Models: what reading a whole model gains, and what declaring models costs.
//!
//! `cargo run --release -p objstash-bench --bin models -- [--models 10] [--per-model 100000]`
//!
//! Builds a stash of `--models` models of `--per-model` generated Speckle objects each
//! (`gen/`), every model saved together and declared with a root that lists it, as a
//! Speckle send does, and the same objects saved without models. Then, on the model of the
//! middle:
//! - cold (page cache dropped before each read, which needs root: without it only warm
//!   figures are printed): `read_model` (one sweep of the file in storage order) against
//!   `get_many` of the model's keys, each on a handle opened after the drop;
//! - warm: the same after a warm-up read, medians of `--rounds`.
//!
//! And the costs: saving with models against `save_all` of the same objects, alternating
//! builds of the two stashes `--rounds` times; file bytes per membership (the difference of
//! the two files, less the roots' bytes, over the members).
//!
//! Files go under `--dir` (default `target/bench-models`, on the disk the repository is on:
//! a tmpfs would make cold reads warm).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use clap::Parser;
use objstash::{Key, Stash};
use rayon::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Models in the stash.
    #[arg(long, default_value_t = 10)]
    models: u64,
    /// Objects per model (besides its root).
    #[arg(long, default_value_t = 100_000)]
    per_model: u64,
    /// Rounds of each measurement (medians are printed).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Where the stashes are made.
    #[arg(long, default_value = "target/bench-models")]
    dir: PathBuf,
    /// The codec of both stashes: gzip (the library's default) or zstd-dict (the Speckle
    /// transport's).
    #[arg(long, default_value = "gzip")]
    codec: objstash::Codec,
    /// Builds only the stash with models, once (for profiling).
    #[arg(long)]
    build_only: bool,
    /// With `--build-only`: builds the stash without models instead.
    #[arg(long)]
    plain: bool,
    /// Reads only, of the stash with models an earlier run made in `--dir` (for profiling).
    #[arg(long)]
    reads_only: bool,
    /// Warm `read_model` repeated this many times more (for profiling).
    #[arg(long, default_value_t = 0)]
    whole_repeats: usize,
    /// Warm `get_many` repeated this many times more (for profiling).
    #[arg(long, default_value_t = 0)]
    many_repeats: usize,
}

/// Objects saved per call.
const CHUNK: u64 = 10_000;

fn drop_page_cache() -> bool {
    let synced = std::process::Command::new("sync").status().is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// The root of model `seed`: a Speckle root, its `__closure` listing every member's id.
fn root(seed: u64, per_model: u64) -> Vec<u8> {
    let closure: Vec<String> =
        (0..per_model).map(|i| format!("\"{}\":1", speckle_gen::id(seed, i))).collect();
    format!(
        "{{\"id\":\"root-{seed}\",\"speckle_type\":\"Base\",\"totalChildrenCount\":{per_model},\
         \"__closure\":{{{}}}}}",
        closure.join(",")
    )
    .into_bytes()
}

fn chunk(seed: u64, start: u64, per_model: u64) -> Vec<Vec<u8>> {
    (start..(start + CHUNK).min(per_model))
        .into_par_iter()
        .map(|i| speckle_gen::object(seed, i))
        .collect()
}

/// Builds the stash at `path`, with models or without; the time spent saving (object
/// generation excluded), and each model's root and member keys.
/// A model as built: its root's key and its members'.
type Built = (Key, Vec<Key>);

fn build(path: &Path, args: &Args, models: bool) -> Result<(Duration, Vec<Built>)> {
    let _ = std::fs::remove_file(path);
    let stash = Stash::builder().codec(args.codec).open(path)?;
    let mut spent = Duration::ZERO;
    let mut built = Vec::new();
    for seed in 0..args.models {
        let mut keys = Vec::with_capacity(args.per_model as usize);
        let root_bytes = root(seed, args.per_model);
        if models {
            let assembly = stash.assemble()?;
            for start in (0..args.per_model).step_by(CHUNK as usize) {
                let objects = chunk(seed, start, args.per_model);
                let t = Instant::now();
                keys.extend(assembly.save_all(&objects)?);
                spent += t.elapsed();
            }
            let t = Instant::now();
            let root = assembly.save(&root_bytes)?;
            let model = assembly.finish(&root, &keys)?;
            spent += t.elapsed();
            if args.build_only {
                eprintln!("model {seed}: saved its root and declared it in {:?}", t.elapsed());
            }
            ensure!(model.complete(), "model {seed}: {model}");
            built.push((root, keys));
        } else {
            for start in (0..args.per_model).step_by(CHUNK as usize) {
                let objects = chunk(seed, start, args.per_model);
                let t = Instant::now();
                keys.extend(stash.save_all(&objects)?);
                spent += t.elapsed();
            }
            let t = Instant::now();
            let root = stash.save(&root_bytes)?;
            spent += t.elapsed();
            built.push((root, keys));
        }
    }
    let t = Instant::now();
    stash.close()?;
    Ok((spent + t.elapsed(), built))
}

/// Reads completed and sectors read by every disk, from `/proc/diskstats` (zero where it
/// cannot be read): how many requests a cold read sent to the disk, which on a disk with
/// latency (not this VM's, whose host caches the file) is what its time is made of.
fn disk_reads() -> (u64, u64) {
    let stats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    stats
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Whole disks only (vda, sda, nvme0n1), not their partitions.
            let name = f.get(2)?;
            let whole = (name.starts_with("vd") || name.starts_with("sd")) && name.len() == 3
                || name.starts_with("nvme") && !name.contains('p');
            whole.then(|| Some((f.get(3)?.parse::<u64>().ok()?, f.get(5)?.parse::<u64>().ok()?)))?
        })
        .fold((0, 0), |(r, s), (dr, ds)| (r + dr, s + ds))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Objects per second of `read` on a fresh handle, the page cache dropped first if
/// `cold`, and the disk requests and MB it read.
fn timed(
    path: &Path,
    cold: bool,
    objects: usize,
    read: impl Fn(&Stash) -> Result<()>,
) -> Result<(f64, u64, f64)> {
    if cold {
        ensure!(drop_page_cache(), "the page cache cannot be dropped");
    }
    let stash = Stash::open(path)?;
    let (requests, sectors) = disk_reads();
    let t = Instant::now();
    read(&stash)?;
    let rate = objects as f64 / t.elapsed().as_secs_f64();
    let (requests_after, sectors_after) = disk_reads();
    stash.close()?;
    Ok((rate, requests_after - requests, (sectors_after - sectors) as f64 * 512.0 / 1e6))
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)?;
    let with = args.dir.join("models.db");
    let without = args.dir.join("plain.db");
    let total = args.models * (args.per_model + 1);
    println!(
        "{} models of {} generated Speckle objects and a root each: {total} objects, {}",
        args.models, args.per_model, args.codec
    );

    // Costs: the two builds alternating.
    let (mut rate_with, mut rate_without) = (Vec::new(), Vec::new());
    let mut models = Vec::new();
    if args.reads_only {
        models = (0..args.models)
            .map(|seed| {
                let keys = (0..args.per_model)
                    .into_par_iter()
                    .map(|i| Key::of(&speckle_gen::object(seed, i)))
                    .collect();
                (Key::of(&root(seed, args.per_model)), keys)
            })
            .collect();
    }
    if args.build_only {
        let (spent, _) = build(if args.plain { &without } else { &with }, &args, !args.plain)?;
        let what = if args.plain { "without" } else { "with" };
        println!("built {what} models: {:.0} objects/s", total as f64 / spent.as_secs_f64());
        return Ok(());
    }
    for _ in 0..if args.reads_only { 0 } else { args.rounds } {
        let (spent, _) = build(&without, &args, false)?;
        rate_without.push(total as f64 / spent.as_secs_f64());
        let (spent, built) = build(&with, &args, true)?;
        rate_with.push(total as f64 / spent.as_secs_f64());
        models = built;
    }
    if !args.reads_only {
        let (rate_with, rate_without) = (median(rate_with), median(rate_without));
        let (bytes_with, bytes_without) =
            (std::fs::metadata(&with)?.len(), std::fs::metadata(&without)?.len());
        let members = args.models * args.per_model;
        let per_membership = (bytes_with as f64 - bytes_without as f64) / members as f64;
        println!("| saving | objects/s | file bytes |");
        println!("|---|---:|---:|");
        println!("| `save_all`, no models | {rate_without:.0} | {bytes_without} |");
        println!(
            "| assembled and declared as models | {rate_with:.0} ({:.2}x) | {bytes_with} \
             ({per_membership:+.1} B per membership) |",
            rate_with / rate_without
        );
    }

    // Reads of the model in the middle.
    let (root, keys) = &models[models.len() / 2];
    let mut all = keys.clone();
    all.push(*root);
    let objects = all.len();
    let whole = |stash: &Stash| -> Result<()> {
        let read = stash.read_model(root)?;
        ensure!(read.is_some_and(|r| r.len() == objects), "the model reads whole");
        Ok(())
    };
    let many = |stash: &Stash| -> Result<()> {
        let read = stash.get_many(&all)?;
        ensure!(read.iter().all(Option::is_some), "every object reads");
        Ok(())
    };
    println!();
    println!("reading one model of {objects} objects, objects/s (medians of {}):", args.rounds);
    println!("| page cache | `read_model` | `get_many` of its keys | ratio |");
    println!("|---|---:|---:|---:|");
    if drop_page_cache() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (mut a_io, mut b_io) = ((0, 0.0), (0, 0.0));
        for _ in 0..args.rounds {
            let (rate, requests, mb) = timed(&with, true, objects, whole)?;
            a.push(rate);
            a_io = (requests, mb);
            let (rate, requests, mb) = timed(&with, true, objects, many)?;
            b.push(rate);
            b_io = (requests, mb);
        }
        let (a, b) = (median(a), median(b));
        println!("| cold | {a:.0} | {b:.0} | {:.2}x |", a / b);
        println!(
            "| cold: disk requests (MB read), last round | {} ({:.0} MB) | {} ({:.0} MB) | {:.2}x fewer |",
            a_io.0,
            a_io.1,
            b_io.0,
            b_io.1,
            b_io.0 as f64 / a_io.0.max(1) as f64
        );
    } else {
        println!("| cold | (not root: the page cache cannot be dropped) | | |");
    }
    let stash = Stash::open(&with)?;
    whole(&stash)?;
    many(&stash)?;
    for _ in 0..args.whole_repeats {
        whole(&stash)?;
    }
    for _ in 0..args.many_repeats {
        many(&stash)?;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let t = Instant::now();
        whole(&stash)?;
        a.push(objects as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        many(&stash)?;
        b.push(objects as f64 / t.elapsed().as_secs_f64());
    }
    stash.close()?;
    let (a, b) = (median(a), median(b));
    println!("| warm | {a:.0} | {b:.0} | {:.2}x |", a / b);
    Ok(())
}
