//! The bounded cache's figures, each a ratio within one run:
//!
//! - `save`: N generated objects saved into a stash capped at a quarter of their stored
//!   size, against the same save without a cap: objects/s, the database files sampled every
//!   50 ms against the cap, resident memory through the run.
//! - `get`: `get` at a million objects on a handle that records uses against a read-only
//!   handle (which records nothing: the read path as it was before uses), alternating.
//! - `zipf`: a skewed read workload (Zipf, s = 1.0, over a million keys; a miss saves the
//!   object, as a cache in front of a server would) into a stash capped at 20% of the
//!   keys' size: the hit rate against an exact LRU simulation of the same trace, at the
//!   number of objects the stash held.
//!
//! - `burst`: objects saved as fast as they come, in calls of a few hundred, into a
//!   stash capped at 16 MiB: the database files (and the file of values, its allocated
//!   blocks) sampled every 5 ms against the cap while saving, and after closing; with the
//!   default grace period and with one of 10 s (what eviction spared before: a grace of 5 s
//!   plus the resolution of uses); in the layout and place of values asked for.
//!
//! `cargo run --release -p objstash-bench --bin bounded -- save [--count 2000000]`
//! `cargo run --release -p objstash-bench --bin bounded -- burst [--bytes 49000000] [--call 256] [--layout single|bucketed] [--values rows|file]`
//! `cargo run --release -p objstash-bench --bin bounded -- get [--count 1000000] [--reads 200000]`
//! `cargo run --release -p objstash-bench --bin bounded -- zipf [--count 1000000] [--accesses 3000000]`

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[path = "../../../examples/common/mod.rs"]
mod common;

use anyhow::Result;
use clap::{Parser, Subcommand};
use common::{mib, pick};
use objstash::{Key, Layout, Stash, Values};

/// Objects generated and saved per `save_all` call.
const CHUNK: u64 = 10_000;

#[derive(Parser, Debug)]
#[command(about = "Figures of the bounded cache: capped saves, get with uses, Zipf hit rate")]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Save into a stash capped at a quarter of the objects' stored size, and without a cap.
    Save {
        #[arg(long, default_value_t = 2_000_000)]
        count: u64,
    },
    /// Save a burst into a stash capped at 16 MiB; the files against the cap.
    Burst {
        /// Raw bytes of objects saved.
        #[arg(long, default_value_t = 49_000_000)]
        bytes: u64,
        /// Objects per `save_all` call.
        #[arg(long, default_value_t = 256)]
        call: usize,
        #[arg(long, default_value_t = Layout::Single)]
        layout: Layout,
        #[arg(long, default_value_t = Values::InRows)]
        values: Values,
    },
    /// `get` with use recording against a handle that records nothing.
    Get {
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 200_000)]
        reads: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Zipf reads through a stash capped at 20% of the keys, against exact LRU.
    Zipf {
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        #[arg(long, default_value_t = 3_000_000)]
        accesses: u64,
        /// Zipf exponent.
        #[arg(long, default_value_t = 1.0)]
        s: f64,
    },
}

fn main() -> Result<()> {
    match Args::parse().what {
        What::Save { count } => save(count),
        What::Burst { bytes, call, layout, values } => burst(bytes, call, layout, values),
        What::Get { count, reads, rounds } => get(count, reads, rounds),
        What::Zipf { count, accesses, s } => zipf(count, accesses, s),
    }
}

/// Resident memory now (VmRSS).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The stash's files on disk: the database, its journals, and the blocks of its file of
/// values (freed values are holes).
fn file_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    ["", "-wal", "-journal", "-values"]
        .iter()
        .map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            let meta = std::fs::metadata(std::path::PathBuf::from(name));
            match *suffix {
                "-values" => meta.map_or(0, |m| m.blocks() * 512),
                _ => meta.map_or(0, |m| m.len()),
            }
        })
        .sum()
}

/// The cap of the burst: what the bug report measured against.
const BURST_CAP: u64 = 16 << 20;

/// Saves `bytes` of generated objects in calls of `call` into a stash capped at
/// [`BURST_CAP`] with the given grace period; the largest files sampled while saving, and
/// the files once closed.
fn burst_run(
    dir: &Path,
    bytes: u64,
    call: usize,
    kind: (Layout, Values),
    grace: Option<Duration>,
) -> Result<(u64, u64, f64)> {
    let path = dir.join(format!("burst-{}.db", grace.map_or(0, |g| g.as_millis())));
    let (layout, values) = kind;
    let mut builder = Stash::builder().layout(layout).values(values).max_size(BURST_CAP);
    if let Some(grace) = grace {
        builder = builder.eviction_grace(grace);
    }
    let stash = builder.open(&path)?;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, path) = (Arc::clone(&done), path.clone());
        std::thread::spawn(move || {
            let mut largest = 0;
            while !done.load(Ordering::Relaxed) {
                largest = largest.max(file_bytes(&path));
                std::thread::sleep(Duration::from_millis(5));
            }
            largest.max(file_bytes(&path))
        })
    };
    let start = Instant::now();
    let (mut saved, mut at) = (0, 0);
    while saved < bytes {
        let objects = speckle_gen::objects(7, at, call);
        saved += objects.iter().map(|o| o.len() as u64).sum::<u64>();
        at += call as u64;
        stash.save_all(&objects)?;
    }
    stash.flush()?;
    let seconds = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let largest = sampler.join().expect("sampler");
    stash.close()?;
    Ok((largest, file_bytes(&path), saved as f64 / seconds / 1e6))
}

fn burst(bytes: u64, call: usize, layout: Layout, values: Values) -> Result<()> {
    let dir = tempfile::tempdir()?;
    println!(
        "{} MB of objects in calls of {call} into a stash capped at {} ({layout} layout, \
         values in {values})",
        bytes / 1_000_000,
        mib(BURST_CAP)
    );
    println!(
        "| grace | MB/s saved | largest files while saving | / cap | files once closed | / cap |"
    );
    println!("|---|---|---|---|---|---|");
    for grace in [None, Some(Duration::from_secs(10))] {
        let (largest, closed, rate) = burst_run(dir.path(), bytes, call, (layout, values), grace)?;
        println!(
            "| {} | {rate:.1} | {} | {:.2}x | {} | {:.3}x |",
            grace.map_or("default".to_string(), |g| format!("{g:?}")),
            mib(largest),
            largest as f64 / BURST_CAP as f64,
            mib(closed),
            closed as f64 / BURST_CAP as f64
        );
    }
    Ok(())
}

/// What one save run measured.
struct SaveRun {
    rate: f64,
    stored: u64,
    largest_files: u64,
    /// The largest write-ahead log sampled.
    largest_log: u64,
    /// Resident memory at each tenth of the run.
    resident: Vec<u64>,
    evicted: u64,
    objects: u64,
}

fn save_run(dir: &Path, count: u64, cap: Option<u64>) -> Result<SaveRun> {
    let path = dir.join(if cap.is_some() { "capped.db" } else { "uncapped.db" });
    let mut builder = Stash::builder();
    if let Some(cap) = cap {
        builder = builder.max_size(cap);
    }
    let stash = builder.open(&path)?;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, path) = (Arc::clone(&done), path.clone());
        std::thread::spawn(move || {
            let (mut largest, mut largest_log) = (0, 0);
            let log = path.with_extension("db-wal");
            while !done.load(Ordering::Relaxed) {
                largest = largest.max(file_bytes(&path));
                largest_log = largest_log.max(std::fs::metadata(&log).map_or(0, |m| m.len()));
                std::thread::sleep(Duration::from_millis(50));
            }
            (largest, largest_log)
        })
    };
    let mut resident = Vec::new();
    let start = Instant::now();
    let mut at = 0;
    while at < count {
        let n = CHUNK.min(count - at);
        stash.save_all(&speckle_gen::objects(1, at, n as usize))?;
        at += n;
        if at % (count / 10).max(1) < CHUNK {
            resident.push(resident_now());
        }
    }
    stash.flush()?;
    let rate = count as f64 / start.elapsed().as_secs_f64();
    let stats = stash.stats()?;
    stash.close()?;
    done.store(true, Ordering::Relaxed);
    let (largest_files, largest_log) = sampler.join().expect("sampler");
    Ok(SaveRun {
        rate,
        stored: stats.stored_bytes + stats.evicted_bytes,
        largest_files,
        largest_log,
        resident,
        evicted: stats.evicted_objects,
        objects: stats.objects,
    })
}

fn resident_now() -> u64 {
    resident()
}

fn save(count: u64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    println!("saving {count} generated objects, first without a cap, then capped");
    let free = save_run(dir.path(), count, None)?;
    let full_files = file_bytes(&dir.path().join("uncapped.db"));
    std::fs::remove_file(dir.path().join("uncapped.db"))?;
    let cap = free.stored / 4;
    let capped = save_run(dir.path(), count, Some(cap))?;
    println!(
        "| run | objects/s | stored (all saved) | largest files | cap | objects kept | evicted |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| no cap | {:.0} | {} | {} | - | {} | 0 |",
        free.rate,
        mib(free.stored),
        mib(free.largest_files.max(full_files)),
        free.objects
    );
    println!(
        "| cap = stored / 4 | {:.0} | {} | {} | {} | {} | {} |",
        capped.rate,
        mib(capped.stored),
        mib(capped.largest_files),
        mib(cap),
        capped.objects,
        capped.evicted
    );
    println!("capped / uncapped objects/s: {:.2}x", capped.rate / free.rate);
    println!("largest write-ahead log sampled, capped: {}", mib(capped.largest_log));
    println!(
        "largest sampled files / cap: {:.3} ({:+.1}%)",
        capped.largest_files as f64 / cap as f64,
        (capped.largest_files as f64 / cap as f64 - 1.0) * 100.0
    );
    let show = |r: &[u64]| {
        r.iter().map(|b| format!("{:.0}", *b as f64 / 1048576.0)).collect::<Vec<_>>().join(" ")
    };
    println!("resident MiB at each tenth, no cap: {}", show(&free.resident));
    println!("resident MiB at each tenth, capped: {}", show(&capped.resident));
    Ok(())
}

fn get(count: u64, reads: usize, rounds: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("get.db");
    let stash = Stash::open(&path)?;
    let mut keys = Vec::with_capacity(count as usize);
    let mut at = 0;
    while at < count {
        let n = CHUNK.min(count - at);
        keys.extend(stash.save_all(&speckle_gen::objects(1, at, n as usize))?);
        at += n;
    }
    stash.flush()?;
    let reader = Stash::builder().read_only(true).open(&path)?;
    let mut state = 0x2545_F491_4F6C_DD1D;
    let time = |stash: &Stash, keys: &[Key]| -> Result<f64> {
        let start = Instant::now();
        for key in keys {
            anyhow::ensure!(stash.get(key)?.is_some(), "{key} missing");
        }
        Ok(keys.len() as f64 / start.elapsed().as_secs_f64())
    };
    let time_many = |stash: &Stash, keys: &[Key]| -> Result<f64> {
        let start = Instant::now();
        for chunk in keys.chunks(1_000) {
            anyhow::ensure!(stash.get_many(chunk)?.iter().all(Option::is_some), "missing");
        }
        Ok(keys.len() as f64 / start.elapsed().as_secs_f64())
    };
    // Warm both: every page read once.
    time(&reader, &keys)?;
    let (mut recording, mut plain) = (Vec::new(), Vec::new());
    let (mut recording_many, mut plain_many) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let sample = pick(&keys, reads, &mut state);
        recording.push(time(&stash, &sample)?);
        let sample = pick(&keys, reads, &mut state);
        plain.push(time(&reader, &sample)?);
        let sample = pick(&keys, reads, &mut state);
        recording_many.push(time_many(&stash, &sample)?);
        let sample = pick(&keys, reads, &mut state);
        plain_many.push(time_many(&reader, &sample)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, p) = (median(&mut recording), median(&mut plain));
    println!("get at {count} objects, {reads} random reads a round, median of {rounds} rounds:");
    println!("  recording uses: {r:.0} objects/s");
    println!("  read-only handle (records nothing): {p:.0} objects/s");
    println!("  ratio: {:.2}x", r / p);
    let (rm, pm) = (median(&mut recording_many), median(&mut plain_many));
    println!("get_many in calls of 1,000 keys (both cores read; the writer's updates compete):");
    println!("  recording uses: {rm:.0} objects/s");
    println!("  read-only handle: {pm:.0} objects/s");
    println!("  ratio: {:.2}x", rm / pm);
    stash.close()?;
    Ok(())
}

/// Exact LRU of `capacity` keys: an intrusive list over slots, a map from key to slot.
struct Lru {
    capacity: usize,
    slot: HashMap<u64, usize>,
    keys: Vec<u64>,
    prev: Vec<usize>,
    next: Vec<usize>,
    head: usize,
    tail: usize,
}

const NIL: usize = usize::MAX;

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            capacity,
            slot: HashMap::with_capacity(capacity),
            keys: Vec::with_capacity(capacity),
            prev: Vec::with_capacity(capacity),
            next: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p] = n
        }
        if n == NIL { self.tail = p } else { self.prev[n] = p }
    }

    fn push_front(&mut self, i: usize) {
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head != NIL {
            self.prev[self.head] = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Whether `key` was cached; it is the most recent afterwards.
    fn access(&mut self, key: u64) -> bool {
        if let Some(&i) = self.slot.get(&key) {
            self.unlink(i);
            self.push_front(i);
            return true;
        }
        let i = if self.keys.len() < self.capacity {
            self.keys.push(key);
            self.prev.push(NIL);
            self.next.push(NIL);
            self.keys.len() - 1
        } else {
            let i = self.tail;
            self.unlink(i);
            self.slot.remove(&self.keys[i]);
            self.keys[i] = key;
            i
        };
        self.slot.insert(key, i);
        self.push_front(i);
        false
    }
}

/// A Zipf sampler over ranks `0..n` (rank 0 the most frequent).
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for rank in 1..=n {
            sum += 1.0 / (rank as f64).powf(s);
            cdf.push(sum);
        }
        cdf.iter_mut().for_each(|c| *c /= sum);
        Zipf { cdf, state: 0x9E37_79B9_7F4A_7C15 }
    }

    fn sample(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

fn zipf(count: u64, accesses: u64, s: f64) -> Result<()> {
    let dir = tempfile::tempdir()?;
    // The cap: 20% of the files a stash of all `count` objects takes.
    let full = dir.path().join("full.db");
    let stash = Stash::open(&full)?;
    let mut at = 0;
    while at < count {
        let n = CHUNK.min(count - at);
        stash.save_all(&speckle_gen::objects(1, at, n as usize))?;
        at += n;
    }
    let all = stash.stats()?;
    stash.close()?;
    let cap = file_bytes(&full) / 5;
    std::fs::remove_file(&full)?;
    println!(
        "{count} objects take {} in a stash; cap at 20%: {}; {accesses} accesses, Zipf s = {s}",
        mib(all.file_bytes),
        mib(cap)
    );

    // Ranks map to objects through a fixed shuffle, so hot objects are not saved first.
    let mut order: Vec<u64> = (0..count).collect();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..order.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let mut sampler = Zipf::new(count, s);
    let trace: Vec<u64> = (0..accesses).map(|_| order[sampler.sample() as usize]).collect();
    let keys: HashMap<u64, Key> = {
        let mut distinct: Vec<u64> = trace.clone();
        distinct.sort_unstable();
        distinct.dedup();
        distinct.into_iter().map(|i| (i, Key::of(&speckle_gen::object(1, i)))).collect()
    };

    let path = dir.path().join("zipf.db");
    let stash = Stash::builder().max_size(cap).open(&path)?;
    // The first third warms the cache; hits are counted over the rest.
    let warm = accesses / 3;
    let (mut hits, mut counted) = (0u64, 0u64);
    let mut held = Vec::new();
    let start = Instant::now();
    for (n, &i) in trace.iter().enumerate() {
        let hit = stash.get(&keys[&i])?.is_some();
        if !hit {
            stash.save(&speckle_gen::object(1, i))?;
        }
        if n as u64 >= warm {
            counted += 1;
            hits += u64::from(hit);
            if n % 50_000 == 0 {
                held.push(stash.len()?);
            }
        }
    }
    let elapsed = start.elapsed();
    let stats = stash.stats()?;
    stash.close()?;
    let held_mean = held.iter().sum::<u64>() / held.len().max(1) as u64;
    let simulate = |capacity: usize| {
        let mut lru = Lru::new(capacity);
        let mut hits = 0u64;
        for (n, &i) in trace.iter().enumerate() {
            let hit = lru.access(i);
            if n as u64 >= warm {
                hits += u64::from(hit);
            }
        }
        hits as f64 / counted as f64
    };
    let ours = hits as f64 / counted as f64;
    let exact = simulate(held_mean as usize);
    println!(
        "{:.0} accesses/s; the stash held {} objects on average ({:.1}% of the keys), files {} \
         at the end (cap {}), {} evicted",
        accesses as f64 / elapsed.as_secs_f64(),
        held_mean,
        held_mean as f64 * 100.0 / count as f64,
        mib(stats.file_bytes),
        mib(cap),
        stats.evicted_objects
    );
    println!("hit rate, objstash:                       {:.2}%", ours * 100.0);
    println!("hit rate, exact LRU of {held_mean} objects: {:.2}%", exact * 100.0);
    println!("difference: {:+.2} percentage points", (ours - exact) * 100.0);
    Ok(())
}
