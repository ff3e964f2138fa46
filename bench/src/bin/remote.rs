//! The remote tier measured against a real S3-compatible server (SeaweedFS on loopback,
//! started here as the tests start it: tests/suite/common/s3.rs, installed by
//! tests/s3/install.sh): push of the million example's objects against one object per
//! request on the same server in the same run, pull into an empty stash, read-through of
//! random keys on a cold stash, pushes at several pack sizes, and a refresh of a remote of
//! thousands of packs (the pack log from a cursor against a listing of every index).
//!
//! `cargo run --release -p objstash-bench --features remote --bin remote -- [--count N]
//!  [--baseline N] [--reads N] [--pack-sizes 1,4,8,16] [--refresh-objects N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../../../examples/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../../../tests/suite/common/s3.rs"]
mod s3;

use anyhow::Result;
use clap::Parser;
use futures::StreamExt;
use object_store::ObjectStore;
use objstash::{Key, Stash};

use common::{mib, peak_memory, pick};

#[derive(Parser, Debug)]
#[command(about = "Push, pull and read-through figures against a local S3 server")]
struct Args {
    /// Objects in the pushed stash (the million example's model).
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Objects uploaded one per request for the baseline (a subset of the same objects).
    #[arg(long, default_value_t = 20_000)]
    baseline: usize,
    /// Requests in flight for the baseline (our push has 4 uploads in flight).
    #[arg(long, default_value_t = 16)]
    baseline_in_flight: usize,
    /// Random keys read through on a cold stash.
    #[arg(long, default_value_t = 10_000)]
    reads: usize,
    /// Pack sizes to compare, in MiB (each pushes every object to a prefix of its own).
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    pack_sizes: Vec<u64>,
    /// Objects pushed in packs of 64 KiB (~100 objects each) for the refresh figures.
    #[arg(long, default_value_t = 300_000)]
    refresh_objects: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    println!("server: SeaweedFS on {} (one weed server process)", server.endpoint());

    // The stash to push: the million example's objects.
    let a = Stash::open(dir.path().join("a.db"))?;
    let mut keys = Vec::with_capacity(args.count as usize);
    let mut raw_bytes = 0u64;
    let mut start = 0;
    while start < args.count {
        let n = (args.count - start).min(10_000) as usize;
        let objects = speckle_gen::objects(1, start, n);
        raw_bytes += objects.iter().map(|o| o.len() as u64).sum::<u64>();
        keys.extend(a.save_all(&objects)?);
        start += n as u64;
    }
    a.close()?;
    println!("{} objects, {} raw", keys.len(), mib(raw_bytes));

    // Push at each pack size, each to its own prefix; the 8 MiB one is the default.
    let mut default_push = None;
    for &size in &args.pack_sizes {
        let remote = server.remote(&format!("push{size}")).pack_size(size << 20);
        let a = Stash::builder().remote(remote).open(dir.path().join("a.db"))?;
        let t = Instant::now();
        let report = a.remote().expect("a remote").push()?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "push, packs of {size:>2} MiB: {:>8.0} objects/s, {:>6.1} MB/s, {} packs, {} requests \
             ({:.5} per object), {:.2} s",
            report.objects as f64 / secs,
            report.bytes as f64 / secs / 1e6,
            report.packs,
            report.requests,
            report.requests as f64 / report.objects as f64,
            secs
        );
        if size == 8 || default_push.is_none() {
            default_push =
                Some((size, report.objects as f64 / secs, report.requests, report.objects));
        }
        a.close()?;
    }

    // The baseline: one object per request (its stored gzip bytes, named by its key), the
    // same server, `baseline_in_flight` requests at once.
    let a = Stash::open(dir.path().join("a.db"))?;
    let subset = &keys[..args.baseline.min(keys.len())];
    let objects: Vec<Vec<u8>> = a.get_many(subset)?.into_iter().map(|o| o.unwrap()).collect();
    let store = Arc::new(server.store());
    let rt = tokio::runtime::Runtime::new()?;
    let t = Instant::now();
    rt.block_on(async {
        futures::stream::iter(subset.iter().zip(&objects).map(|(key, object)| {
            let store = Arc::clone(&store);
            let path = object_store::path::Path::from(format!("single/{key}"));
            let body = object_store::PutPayload::from(object.clone());
            async move { store.put(&path, body).await }
        }))
        .buffer_unordered(args.baseline_in_flight)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
    })?;
    let baseline_rate = subset.len() as f64 / t.elapsed().as_secs_f64();
    println!(
        "one object per request ({} in flight): {:.0} objects/s, 1 request per object ({} objects)",
        args.baseline_in_flight,
        baseline_rate,
        subset.len()
    );
    if let Some((size, rate, requests, objects)) = default_push {
        println!(
            "push ({size} MiB packs) against one object per request: {:.1}x the objects/s, \
             {:.0}x fewer requests",
            rate / baseline_rate,
            objects as f64 / requests as f64
        );
    }
    a.close()?;

    // Pull into an empty stash.
    let size = default_push.map_or(8, |d| d.0);
    let b = Stash::builder()
        .remote(server.remote(&format!("push{size}")))
        .open(dir.path().join("b.db"))?;
    let t = Instant::now();
    let pulled = b.remote().expect("a remote").pull()?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "pull into an empty stash: {:.0} objects/s, {:.1} MB/s, {} requests ({:.5} per object), {:.2} s",
        pulled.objects as f64 / secs,
        pulled.bytes as f64 / secs / 1e6,
        pulled.requests,
        pulled.requests as f64 / pulled.objects.max(1) as f64,
        secs
    );
    b.close()?;

    // Read-through on a cold stash: the first call lists the remote and reads every index.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let wanted: Vec<Key> = pick(&keys, args.reads, &mut state);
    for (label, many) in [("get, one key per call", false), ("get_many, one call", true)] {
        let name = format!("cold-{many}.db");
        let c = Stash::builder()
            .remote(server.remote(&format!("push{size}")))
            .open(dir.path().join(name))?;
        let t = Instant::now();
        let status = c.remote().expect("a remote").refresh()?;
        let refresh = t.elapsed();
        let t = Instant::now();
        let found = if many {
            c.get_many(&wanted)?.into_iter().filter(Option::is_some).count()
        } else {
            let mut found = 0;
            for key in &wanted {
                found += usize::from(c.get(key)?.is_some());
            }
            found
        };
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(found, wanted.len(), "every key is on the remote");
        c.flush()?;
        // The catalog's file and its write-ahead log (the first refresh leaves most of it
        // in the log until a checkpoint).
        let catalog = c.remote().expect("a remote").refresh()?.local_index_bytes;
        println!(
            "local copy of the remote's indexes: {} ({:.0} bytes per object)",
            mib(catalog),
            catalog as f64 / status.objects as f64
        );
        println!(
            "read-through of {} random keys, {label}: {:.0} objects/s, refresh first {:.2} s \
             ({} requests for {} indexes, {} of index)",
            wanted.len(),
            wanted.len() as f64 / secs,
            refresh.as_secs_f64(),
            status.requests,
            status.packs,
            mib(status.objects * 52),
        );
        c.close()?;
    }
    refresh_figures(&server, dir.path(), args.refresh_objects)?;
    if let Some(peak) = peak_memory() {
        println!("peak resident memory: {}", mib(peak));
    }
    Ok(())
}

/// A refresh of a remote of thousands of packs, in the same run: the first (the whole pack
/// log), one with nothing new, one after a push of a few packs, and a listing of every
/// index (what each refresh was before the pack log). One machine: its clock is the
/// pushers', so the clock margin is zero here (the default of 10 minutes lists the last
/// 10 minutes' events again each time).
fn refresh_figures(server: &s3::S3Server, dir: &std::path::Path, count: u64) -> Result<()> {
    use futures::TryStreamExt;
    let remote = server.remote("many").pack_size(64 << 10).clock_skew(Duration::ZERO);
    let a = Stash::builder().remote(remote.clone()).open(dir.join("many-a.db"))?;
    let mut start = 0;
    while start < count {
        let n = (count - start).min(10_000) as usize;
        a.save_all(&speckle_gen::objects(3, start, n))?;
        start += n as u64;
    }
    let pushed = a.remote().expect("a remote").push()?;
    println!("refresh: a remote of {} objects in {} packs of 64 KiB", pushed.objects, pushed.packs);
    let b = Stash::builder().remote(remote).open(dir.join("many-b.db"))?;
    let tier = b.remote().expect("a remote");
    let timed = || -> Result<(objstash::RemoteStatus, f64)> {
        let t = Instant::now();
        let status = tier.refresh()?;
        Ok((status, t.elapsed().as_secs_f64() * 1e3))
    };
    let (first, ms) = timed()?;
    println!(
        "refresh, first (the whole log): {} requests, {} entries listed, {} indexes read, {ms:.0} ms",
        first.requests, first.listed, first.new_packs
    );
    let mut idle = Vec::new();
    for _ in 0..5 {
        let (status, ms) = timed()?;
        assert_eq!(status.listed, 0, "{status}");
        idle.push((status.requests, ms));
    }
    idle.sort_by(|x, y| x.1.total_cmp(&y.1));
    let (idle_requests, idle_ms) = idle[2];
    println!(
        "refresh, nothing new (median of 5): {idle_requests} requests, 0 listed, {idle_ms:.1} ms"
    );
    a.save_all(&speckle_gen::objects(3, count, 1_000))?;
    let more = a.remote().expect("a remote").push()?;
    let (after, ms) = timed()?;
    println!(
        "refresh after a push of {} packs: {} requests, {} listed, {} indexes read, {ms:.1} ms",
        more.packs, after.requests, after.listed, after.new_packs
    );
    // Before the pack log every refresh listed `indexes/`: its pages, timed the same way.
    let store = server.store();
    let rt = tokio::runtime::Runtime::new()?;
    let mut listings = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let names: Vec<_> = rt.block_on(
            store
                .list(Some(&object_store::path::Path::from("many/indexes")))
                .try_collect::<Vec<_>>(),
        )?;
        listings.push((names.len(), t.elapsed().as_secs_f64() * 1e3));
    }
    listings.sort_by(|x, y| x.1.total_cmp(&y.1));
    let (names, list_ms) = listings[2];
    println!(
        "a listing of every index, as each refresh was before (median of 5): {} requests, {names} \
         listed, {list_ms:.1} ms; a refresh with nothing new is {:.1}x faster",
        names.div_ceil(1_000),
        list_ms / idle_ms
    );
    a.close()?;
    b.close()?;
    Ok(())
}
