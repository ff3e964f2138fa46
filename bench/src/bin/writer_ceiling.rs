//! The writer's ceiling: rows handed to the writer already hashed and compressed (no work
//! for the producers but a map insert and a channel send), so the figure is what the one
//! writer thread and SQLite can take. Rows/s of each million, up to `--count`, the bytes
//! written (the log and the checkpoints) a row, what that makes a second, and the
//! machine's dirty page-cache bytes at the million's end: once those reach the kernel's
//! dirty limit, every write waits for the disk, and rows/s times bytes a row is the
//! disk's bandwidth.
//!
//! `cargo run --release -p objstash-bench --bin writer_ceiling -- [--count 10000000]
//!  [--layout single|bucketed] [--durability fast|safe|owned] [--batch-size ROWS]`
//!
//! The rows' bytes are gzipped generated objects (a pool of 100,000 reused), their keys
//! random: realistic sizes and a realistic key index, though no key matches its bytes
//! (nothing reads them back).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use flate2::Compression;
use flate2::write::GzEncoder;
use objstash::{Durability, Key, Layout, Stash};
use objstash_bench::proc_io;
use rayon::prelude::*;

const POOL: u64 = 100_000;
const CALL: u64 = 10_000;

#[derive(Parser, Debug)]
struct Args {
    /// Rows to write.
    #[arg(long, default_value_t = 10_000_000)]
    count: u64,
    #[arg(long, default_value_t = Layout::Single)]
    layout: Layout,
    #[arg(long, default_value_t = Durability::Fast)]
    durability: Durability,
    /// Rows a transaction of the writer (default: the library's).
    #[arg(long)]
    batch_size: Option<usize>,
}

fn main() -> Result<()> {
    let Args { count, layout, durability, batch_size } = Args::parse();
    let pool: Vec<(u64, Arc<Vec<u8>>)> = (0..POOL)
        .into_par_iter()
        .map(|i| {
            let object = speckle_gen::object(1, i);
            let mut gz = GzEncoder::new(Vec::new(), Compression::new(1));
            std::io::Write::write_all(&mut gz, &object).expect("in memory");
            (object.len() as u64, Arc::new(gz.finish().expect("in memory")))
        })
        .collect();
    let mean = pool.iter().map(|(_, d)| d.len()).sum::<usize>() / pool.len();
    println!("{count} rows of {mean} B on average, {layout} layout, {durability}");
    let dir = tempfile::tempdir()?;
    let mut builder = Stash::builder().layout(layout).durability(durability);
    if let Some(rows) = batch_size {
        builder = builder.batch_size(rows);
    }
    let stash = builder.open(dir.path().join("w.db"))?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut key = || {
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        Key::from_bytes(bytes)
    };
    let start = Instant::now();
    let mut million = Instant::now();
    let mut at = 0u64;
    let mut written = proc_io("wchar");
    while at < count {
        let n = CALL.min(count - at);
        let rows = (at..at + n)
            .map(|i| {
                let (raw, data) = &pool[(i % POOL) as usize];
                (key(), *raw, Arc::clone(data))
            })
            .collect();
        objstash::writer_benchmark::queue_rows(&stash, rows)?;
        at += n;
        if at.is_multiple_of(1_000_000) || at == count {
            stash.flush()?;
            let rows = if at.is_multiple_of(1_000_000) { 1_000_000 } else { at % 1_000_000 };
            let now_written = proc_io("wchar");
            let seconds = million.elapsed().as_secs_f64();
            println!(
                "rows {:>9}: {:>9.0} rows/s this million, {:>9.0} rows/s overall, \
                 {:>6.0} B written a row, {:>5.0} MB/s written, {:>5.0} MB dirty",
                at,
                rows as f64 / seconds,
                at as f64 / start.elapsed().as_secs_f64(),
                (now_written - written) as f64 / rows as f64,
                (now_written - written) as f64 / seconds / 1e6,
                dirty_bytes() as f64 / 1e6
            );
            written = now_written;
            million = Instant::now();
        }
    }
    stash.close()?;
    Ok(())
}

/// The machine's page-cache bytes waiting for or under writeback (`nr_dirty` and
/// `nr_writeback` of `/proc/vmstat`, pages of 4 KiB; 0 where there is none).
fn dirty_bytes() -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    let pages: u64 = vmstat
        .lines()
        .filter_map(|line| {
            let n =
                line.strip_prefix("nr_dirty ").or_else(|| line.strip_prefix("nr_writeback "))?;
            n.trim().parse::<u64>().ok()
        })
        .sum();
    pages * 4096
}
