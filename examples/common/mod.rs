//! Helpers shared by the example programs.
#![allow(dead_code)] // each example uses a part of it

/// The process's peak resident memory (VmHWM), where /proc tells it.
pub fn peak_memory() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// The process's resident memory now, as its own (`RssAnon`: heap, stacks) and as mapped
/// files (`RssFile`: the program, libraries and memory-mapped reads of the stash, pages the
/// OS page cache holds anyway and can drop), where /proc tells them.
pub fn resident_memory() -> Option<(u64, u64)> {
    Some((status_bytes("RssAnon:")?, status_bytes("RssFile:")?))
}

fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Random picks from `items` (xorshift; `state` carries the generator between calls).
pub fn pick<T: Copy>(items: &[T], count: usize, state: &mut u64) -> Vec<T> {
    (0..count)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            items[(*state % items.len() as u64) as usize]
        })
        .collect()
}
