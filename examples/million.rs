//! The main job: write a million realistic CAD/BIM objects into a fresh stash and report
//! speed, reads, memory and sizes: per-object gzip and per-object zstd with a trained
//! dictionary beside what gzipping the same objects as one stream gives.
//!
//! `cargo run --release --example million -- [--count N] [--layout single|bucketed]
//!  [--durability fast|safe] [--codec gzip|zstd-dict] [--path P] [--keep] [--seed S]
//!  [--level L] [--reads N] [--read-mmap MiB] [--values rows|file]`

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use common::{peak_memory, resident_memory};

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use objstash::{Codec, Durability, Key, Layout, Stash, Values};
use rayon::prelude::*;

/// Objects generated and saved per `save_all` call: bounds the example's own memory.
const CHUNK: u64 = 4_000;

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
    /// Codec of the stored objects: gzip or zstd-dict.
    #[arg(long, default_value = "gzip")]
    codec: Codec,
    /// Random objects read back with `get` to time reads (warm cache).
    #[arg(long, default_value_t = 20_000)]
    reads: u64,
    /// gzip level, 0 to 9 (default: the library's, which depends on its deflate backend).
    #[arg(long)]
    level: Option<u32>,
    /// Rows per writer transaction (default: the library's).
    #[arg(long)]
    batch_size: Option<usize>,
    /// MiB of the file each read connection may memory-map (0: none; default: the library's).
    #[arg(long)]
    read_mmap: Option<u64>,
    /// Where the stored bytes go: in the rows, or in a file beside the database.
    #[arg(long, default_value = "rows")]
    values: Values,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let path = args.path.clone().unwrap_or_else(|| temp.path().join("million.db"));
    let mut builder = Stash::builder();
    if let Some(batch_size) = args.batch_size {
        builder = builder.batch_size(batch_size);
    }
    if let Some(level) = args.level {
        builder = builder.compression_level(level);
    }
    if let Some(mib) = args.read_mmap {
        builder = builder.read_mmap_size(mib << 20);
    }
    let stash = builder
        .layout(args.layout)
        .durability(args.durability)
        .codec(args.codec)
        .values(args.values)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let already = stash.len()?;
    println!(
        "writing {} objects into {} (layout {}, durability {}, codec {}, values in {}, gzip \
         level {}{})",
        args.count,
        path.display(),
        args.layout,
        args.durability,
        args.codec,
        args.values,
        args.level.map_or_else(|| "default".to_string(), |l| l.to_string()),
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
    let saving_peak = peak_memory();
    let reads = read_rates(&stash, args.seed, args.count, args.reads)?;
    let after_reads = resident_memory();
    // The size report below needs no stash: closing it first gives its caches and pending
    // rows back before the report's compressors allocate.
    stash.close()?;
    // At rest: closing folds the write-ahead log (which holds about one batch while the
    // writer saves) into the file and removes it. The file of values, if any, counts too.
    let at_rest: u64 = ["", "-wal", "-values"]
        .iter()
        .map(|suffix| {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            std::fs::metadata(name).map_or(0, |m| m.len())
        })
        .sum();
    let sizes_start = Instant::now();
    // The references are zlib's gzip (flate2) at the level asked for, else level 2.
    let reference = args.level.unwrap_or(2);
    let sizes = Sizes::measure(args.seed, args.count, reference)?;
    let sizes_time = sizes_start.elapsed();

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
    println!(
        "reads              {:>10.0} get/s warm (one thread, {} random keys, median of {WARM_PASSES} \
         passes; the first, right after saving: {:.0}/s)",
        reads.get,
        args.reads.min(args.count),
        reads.first_get
    );
    println!(
        "                   {:>10.0} objects/s by get_many of 1,000 keys ({:.2}x the get loop)",
        reads.get_many,
        reads.get_many / reads.get
    );
    let show = |peak: Option<u64>| peak.map_or("unknown".to_string(), common::mib);
    println!(
        "peak memory        {:>10}  ({} when saving ended)",
        show(peak_memory()),
        show(saving_peak)
    );
    if let Some((own, files)) = after_reads {
        println!(
            "resident memory    {:>10}  own (RssAnon) after the reads, and {} of mapped files \
             (RssFile: the program and the stash's pages its reads mapped)",
            common::mib(own),
            common::mib(files)
        );
    }
    println!();
    println!("{stats}");
    println!(
        "files once closed  {:>16}  {:>10}  {:>8.0} B/object beyond the stored bytes (the \
         log folded in)",
        at_rest,
        common::mib(at_rest),
        (at_rest as f64 - stats.stored_bytes as f64) / stats.objects.max(1) as f64
    );
    println!();
    println!(
        "size report: the same {} objects compressed four ways ({:.1} s to compute)",
        args.count,
        sizes_time.as_secs_f64()
    );
    println!("{:<34} {:>14} {:>10} {:>7} {:>14}", "", "bytes", "", "ratio", "x whole-stream");
    let row = |name: &str, bytes: u64| {
        println!(
            "{name:<34} {bytes:>14} {:>10} {:>7.2} {:>14.2}",
            common::mib(bytes),
            raw_bytes as f64 / bytes as f64,
            bytes as f64 / sizes.whole_gzip as f64
        );
    };
    row("raw", raw_bytes);
    row(&format!("per-object zlib gzip (level {reference})"), sizes.gzip);
    row(&format!("per-object zstd + {} KiB dictionary", sizes.dict_bytes >> 10), sizes.zstd_dict);
    row(&format!("whole-stream gzip (level {reference})"), sizes.whole_gzip);
    row(&format!("stored by this stash ({})", args.codec), stats.stored_bytes);
    row("database file", stats.file_bytes);
    if args.keep && args.path.is_none() {
        let kept = temp.keep();
        println!("kept {}", kept.display());
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// Passes over the same keys after the first, whose median is the warm figure.
const WARM_PASSES: usize = 3;

/// Read rates over the same random keys, in objects per second.
struct ReadRates {
    /// `get` on one thread, the first pass right after saving.
    first_get: f64,
    /// `get` on one thread, median of [`WARM_PASSES`] passes after the first.
    get: f64,
    /// `get_many` in batches of 1,000, median of [`WARM_PASSES`] passes.
    get_many: f64,
}

/// Times `get` and `get_many` over `reads` random keys of the model. The first `get` pass
/// is reported apart: it also warms SQLite's caches of the read connection, and right
/// after a large save the kernel is still writing the file back.
fn read_rates(stash: &Stash, seed: u64, count: u64, reads: u64) -> Result<ReadRates> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let keys: Vec<Key> = (0..reads.min(count))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Key::of(&speckle_gen::object(seed, x % count))
        })
        .collect();
    if keys.is_empty() {
        return Ok(ReadRates { first_get: 0.0, get: 0.0, get_many: 0.0 });
    }
    let rate = |pass: &dyn Fn() -> Result<()>| -> Result<f64> {
        let start = Instant::now();
        pass()?;
        Ok(keys.len() as f64 / start.elapsed().as_secs_f64())
    };
    let gets = || {
        for key in &keys {
            anyhow::ensure!(stash.get(key)?.is_some(), "{key} was saved but is not found");
        }
        Ok(())
    };
    let batches = || {
        for chunk in keys.chunks(1_000) {
            let found = stash.get_many(chunk)?;
            anyhow::ensure!(found.iter().all(Option::is_some), "a saved key is lost");
        }
        Ok(())
    };
    let median = |pass: &dyn Fn() -> Result<()>| -> Result<f64> {
        let mut rates = (0..WARM_PASSES).map(|_| rate(pass)).collect::<Result<Vec<f64>>>()?;
        rates.sort_by(f64::total_cmp);
        Ok(rates[rates.len() / 2])
    };
    let first_get = rate(&gets)?;
    Ok(ReadRates { first_get, get: median(&gets)?, get_many: median(&batches)? })
}

/// The objects' sizes compressed each way, computed in parallel chunks of [`CHUNK`].
struct Sizes {
    gzip: u64,
    zstd_dict: u64,
    dict_bytes: usize,
    whole_gzip: u64,
}

impl Sizes {
    /// Per-object gzip and zstd with a dictionary trained as a stash trains it (on the
    /// first objects, up to the default sample size), and whole-stream gzip. A deflate
    /// window is 32 KB, so gzipping 4,000-object chunks (5 MB each) as separate members
    /// costs nothing measurable against one stream.
    fn measure(seed: u64, count: u64, level: u32) -> Result<Self> {
        let mut sample = Vec::new();
        let mut sampled = 0;
        let mut i = 0;
        while sampled < DICTIONARY_SAMPLE_BYTES && i < count {
            let object = speckle_gen::object(seed, i);
            sampled += object.len();
            sample.push(object);
            i += 1;
        }
        let dict = zstd::dict::from_samples(&sample, DICTIONARY_BYTES)?;
        let starts: Vec<u64> = (0..count).step_by(CHUNK as usize).collect();
        let (gzip, zstd_dict, whole_gzip) = starts
            .par_iter()
            .map(|&start| {
                let mut gz =
                    flate2::write::GzEncoder::new(Counter(0), flate2::Compression::new(level));
                let mut deflate = flate2::Compress::new(flate2::Compression::new(level), false);
                let mut zstd = zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, &dict)?;
                let mut out = Vec::new();
                let (mut gzip, mut zstd_bytes) = (0u64, 0u64);
                for i in start..(start + CHUNK).min(count) {
                    let object = speckle_gen::object(seed, i);
                    gz.write_all(&object)?;
                    deflate.reset();
                    out.clear();
                    out.reserve(object.len() + 1024);
                    deflate
                        .compress_vec(&object, &mut out, flate2::FlushCompress::Finish)
                        .map_err(std::io::Error::other)?;
                    gzip += GZIP_FRAME + out.len() as u64;
                    zstd_bytes += zstd.compress(&object)?.len() as u64;
                }
                Ok((gzip, zstd_bytes, gz.finish()?.0))
            })
            .try_reduce(|| (0, 0, 0), |a, b| Ok((a.0 + b.0, a.1 + b.1, a.2 + b.2)))
            .map_err(|e: std::io::Error| anyhow::anyhow!(e))?;
        Ok(Sizes { gzip, zstd_dict, dict_bytes: dict.len(), whole_gzip })
    }
}

/// A gzip member's header and trailer around the deflate stream (RFC 1952).
const GZIP_FRAME: u64 = 18;
/// What a stash samples and trains its dictionary with (see `Codec::ZstdDict`).
const DICTIONARY_SAMPLE_BYTES: usize = 4 << 20;
const DICTIONARY_BYTES: usize = 64 << 10;
const ZSTD_LEVEL: i32 = 1;

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
