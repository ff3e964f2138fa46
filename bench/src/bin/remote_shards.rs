//! A new machine against a large remote, with and without a compacted index, in the same
//! run against a real S3-compatible server (SeaweedFS on loopback, started here as the
//! tests start it): a remote of `--count` generated objects, the last `--model` of them a
//! model pushed on its own; a new machine's first read-through of one object and its
//! `get_many` of the model (requests, index bytes, ms), first on the remote as pushed
//! (every pack index), then after `remote compact`.
//!
//! `cargo run --release -p objstash-bench --features remote --bin remote_shards --
//!  [--count N] [--model N]`

use std::time::Instant;

#[path = "../../../examples/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../../../tests/suite/common/s3.rs"]
mod s3;

use anyhow::Result;
use clap::Parser;
use objstash::{Key, Stash};

use common::{mib, peak_memory};

#[derive(Parser, Debug)]
#[command(about = "A new machine against a large remote, with and without compaction")]
struct Args {
    /// Objects on the remote.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Objects of the model, pushed last.
    #[arg(long, default_value_t = 100_000)]
    model: u64,
}

fn fill(stash: &Stash, seed: u64, count: u64) -> Result<Vec<Key>> {
    let mut keys = Vec::with_capacity(count as usize);
    let mut at = 0;
    while at < count {
        let n = (count - at).min(10_000);
        keys.extend(stash.save_all(&speckle_gen::objects(seed, at, n as usize))?);
        at += n;
    }
    Ok(keys)
}

/// A new machine: one read-through, then the model; prints what each cost.
fn new_machine(
    server: &s3::S3Server,
    dir: &std::path::Path,
    what: &str,
    one: Key,
    model: &[Key],
) -> Result<()> {
    let stash =
        Stash::builder().remote(server.remote("big")).open(dir.join(format!("{what}.db")))?;
    let tier = stash.remote().expect("a remote");
    let t = Instant::now();
    assert!(stash.get(&one)?.is_some());
    println!(
        "{what}: first read-through {} requests, {} of index, {:.0} ms",
        tier.requests(),
        mib(tier.index_bytes()),
        t.elapsed().as_secs_f64() * 1000.0
    );
    let (requests, bytes) = (tier.requests(), tier.index_bytes());
    let t = Instant::now();
    let got = stash.get_many(model)?;
    assert!(got.iter().all(Option::is_some));
    println!(
        "{what}: get_many of the model ({} objects) {} requests, {} of index, {:.1} s",
        model.len(),
        tier.requests() - requests,
        mib(tier.index_bytes() - bytes),
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let status = tier.refresh()?;
    println!(
        "{what}: a refresh then {} requests, {:.0} ms; this machine holds {} of index",
        status.requests,
        t.elapsed().as_secs_f64() * 1000.0,
        mib(status.local_index_bytes)
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    println!("server: SeaweedFS on {}", server.endpoint());
    let a = Stash::builder().remote(server.remote("big")).open(dir.path().join("a.db"))?;
    let t = Instant::now();
    let keys = fill(&a, 1, args.count - args.model)?;
    a.remote().expect("a remote").push()?;
    let model = fill(&a, 2, args.model)?;
    a.remote().expect("a remote").push()?;
    let whole = a.remote().expect("a remote").refresh()?;
    println!(
        "remote: {} objects in {} packs, {} of pack indexes ({:.0} s to save and push)",
        whole.objects,
        whole.packs,
        mib(whole.objects * 52),
        t.elapsed().as_secs_f64()
    );
    let one = keys[keys.len() / 3];
    new_machine(&server, dir.path(), "every index", one, &model)?;
    let compacted = a.remote().expect("a remote").compact()?;
    println!("{compacted}");
    new_machine(&server, dir.path(), "compacted", one, &model)?;
    if let Some(peak) = peak_memory() {
        println!("peak resident memory: {}", mib(peak));
    }
    Ok(())
}
