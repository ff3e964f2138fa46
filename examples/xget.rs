use objstash::{Key, Stash};
use std::time::Instant;
fn main() -> anyhow::Result<()> {
    let path = std::env::args().nth(1).unwrap();
    let count: u64 = 1_000_000;
    let reads: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(20_000);
    let mut x = 12345u64 | 1;
    let keys: Vec<Key> = (0..reads)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Key::of(&speckle_gen::object(1, x % count))
        })
        .collect();
    let stash = Stash::open(&path)?;
    for round in 0..3 {
        let start = Instant::now();
        for k in &keys {
            assert!(stash.get(k)?.is_some());
        }
        let r = keys.len() as f64 / start.elapsed().as_secs_f64();
        let status = std::fs::read_to_string("/proc/self/status")?;
        let hwm = status.lines().find(|l| l.starts_with("VmHWM")).unwrap().to_string();
        let start = Instant::now();
        for k in &keys {
            assert!(stash.contains(k)?);
        }
        let c = keys.len() as f64 / start.elapsed().as_secs_f64();
        println!("round {round}: get {r:.0}/s contains {c:.0}/s {hwm}");
    }
    Ok(())
}
