//! What keeping a team's remote bounded costs, against a real S3-compatible server
//! (SeaweedFS on loopback, started here as the tests start it): a remote of the million
//! example's objects pushed twice at once by two machines (the second push's packs all
//! duplicates), then a collection that takes the duplicates out, one that deletes them,
//! use reports of a machine that read a tenth of the objects, and a trim by age that
//! keeps that tenth (repacking it) and drops the rest.
//!
//! `cargo run --release -p objstash-bench --features remote --bin remote_gc -- [--count N]`

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[path = "../../../examples/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../../../tests/suite/common/s3.rs"]
mod s3;

use anyhow::Result;
use clap::Parser;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use objstash::{CollectOptions, Key, Stash, TrimOptions};

use common::{mib, peak_memory};

#[derive(Parser, Debug)]
#[command(about = "Garbage collection and trim figures against a local S3 server")]
struct Args {
    /// Objects in each pushed stash (the million example's model).
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// One object in this many is read by another machine after the cut.
    #[arg(long, default_value_t = 10)]
    read_one_in: usize,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

async fn names(store: &object_store::aws::AmazonS3, prefix: &str) -> Result<Vec<String>> {
    let metas: Vec<_> = store.list(Some(&StorePath::from(prefix))).try_collect().await?;
    Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = server.store();
    println!("server: SeaweedFS on {}", server.endpoint());
    let remote = || server.remote("gc").clock_skew(Duration::ZERO);

    // Two machines hold the same objects, saved in opposite orders.
    let mut keys = Vec::with_capacity(args.count as usize);
    for (name, reversed) in [("a.db", false), ("b.db", true)] {
        let stash = Stash::open(dir.path().join(name))?;
        let mut start = 0;
        while start < args.count {
            let n = (args.count - start).min(10_000);
            let from = if reversed { args.count - start - n } else { start };
            let mut objects = speckle_gen::objects(1, from, n as usize);
            if reversed {
                objects.reverse();
            }
            let saved = stash.save_all(&objects)?;
            if !reversed {
                keys.extend(saved);
            }
            start += n;
        }
        stash.close()?;
    }
    // A pushes; B pushes without seeing A's packs (their events hidden meanwhile), as a
    // push at the same moment would.
    let a = Stash::builder().remote(remote()).open(dir.path().join("a.db"))?;
    let t = Instant::now();
    let pushed_a = a.remote().expect("a remote").push()?;
    println!("push A: {pushed_a} in {:.1} s", t.elapsed().as_secs_f64());
    a.close()?;
    let events = rt.block_on(names(&store, "gc/log"))?;
    rt.block_on(async {
        for e in &events {
            store.delete(&StorePath::from(e.as_str())).await?;
        }
        anyhow::Ok(())
    })?;
    let b = Stash::builder().remote(remote()).open(dir.path().join("b.db"))?;
    let pushed_b = b.remote().expect("a remote").push()?;
    println!("push B (unaware of A): {pushed_b}");
    b.close()?;
    rt.block_on(async {
        for e in &events {
            store.put(&StorePath::from(e.as_str()), Vec::<u8>::new().into()).await?;
        }
        anyhow::Ok(())
    })?;
    let cut = now_ms();
    while now_ms() <= cut {}

    let c = Stash::builder().remote(remote()).open(dir.path().join("c.db"))?;
    let tier = c.remote().expect("a remote");
    let status = tier.refresh()?;
    println!("remote: {} packs, {} bytes", status.packs, status.bytes);
    let t = Instant::now();
    let first = tier.collect(&CollectOptions::default())?;
    println!(
        "collection (duplicates out of the listing): {:.2} s; {first}",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let second = tier.collect(&CollectOptions::default().grace(Duration::ZERO))?;
    println!("collection (their bodies deleted): {:.2} s; {second}", t.elapsed().as_secs_f64());
    let collected = tier.refresh()?;
    println!("remote collected: {} packs, {} bytes", collected.packs, collected.bytes);

    // Another machine reads one object in `read_one_in` through, then closes (its uses go up).
    let reader = Stash::builder().remote(remote()).open(dir.path().join("reader.db"))?;
    let read: Vec<Key> = keys.iter().step_by(args.read_one_in).copied().collect();
    let t = Instant::now();
    for chunk in read.chunks(10_000) {
        reader.get_many(chunk)?;
    }
    reader.close()?;
    let reports = rt.block_on(names(&store, "gc/uses"))?;
    println!(
        "{} objects read through in {:.1} s; {} use reports on the remote",
        read.len(),
        t.elapsed().as_secs_f64(),
        reports.len()
    );
    let t = Instant::now();
    let age = Duration::from_millis(now_ms() - cut);
    let trimmed = tier.trim(&TrimOptions::default().unused_for(age).grace(Duration::ZERO))?;
    println!("trim by age: {:.2} s; {trimmed}", t.elapsed().as_secs_f64());
    let after = tier.refresh()?;
    println!(
        "remote after: {} packs, {} objects, {} bytes ({:.3}x the collected remote)",
        after.packs,
        after.objects,
        after.bytes,
        after.bytes as f64 / collected.bytes as f64
    );
    if let Some(peak) = peak_memory() {
        println!("peak resident memory: {}", mib(peak));
    }
    Ok(())
}
