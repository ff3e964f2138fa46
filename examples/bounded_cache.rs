//! A bounded cache: a size cap that evicts the least recently used objects, pins for what
//! must never go, and expiry by last use.
//!
//! `cargo run --example bounded_cache`

use std::time::Duration;

use anyhow::Result;
use objstash::Stash;

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // The cap is recorded in the stash: every handle and every later open keeps to it.
    let stash = Stash::builder().max_size(8 << 20).open(dir.path().join("cache.db"))?;

    // Local work that exists nowhere else: pinned, never evicted.
    let mine = stash.save_pinned(&[&br#"{"draft":"my unsaved model"}"#[..]])?;

    // Far more than the cap of cached objects: the least recently used go.
    for batch in 0..40u64 {
        let objects: Vec<Vec<u8>> = (0..100u64).map(|i| noise(batch * 100 + i, 4 << 10)).collect();
        stash.save_all(&objects)?;
    }
    stash.flush()?;
    let stats = stash.stats()?;
    println!(
        "{} objects kept, {} evicted, pinned still there: {}",
        stats.objects,
        stats.evicted_objects,
        stash.contains(&mine[0])?
    );

    // One-off evictions: what nobody used for a while, or down to a size.
    stash.evict_unused_since(Duration::from_secs(30 * 86_400))?;
    stash.trim_to(4 << 20)?;
    println!("{}", stash.stats()?);
    stash.close()?;
    Ok(())
}

/// Incompressible bytes, so that sizes are what they look like.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
