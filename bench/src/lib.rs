//! Helpers shared by the benchmark programs of `src/bin/`; the criterion benchmarks live
//! in `benches/`.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use anyhow::{Context, Result};

/// A fixed shuffle of `0..n`: the order every benchmark reads its objects in.
pub fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// A counter of this process's I/O so far, the line `field` of Linux's `/proc/self/io`
/// (`wchar`: bytes handed to `write` and `pwrite`; `syscr`: read system calls, such as
/// SQLite's `pread` of a page); 0 where there is none.
pub fn proc_io(field: &str) -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Calls `each` with the objects of a file of the peers benchmark (each a 4-byte
/// little-endian length and its bytes) in batches of up to `batch`.
pub fn for_each_batch(
    path: &Path,
    batch: usize,
    mut each: impl FnMut(&[Vec<u8>]) -> Result<()>,
) -> Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut file = BufReader::with_capacity(1 << 20, file);
    let mut objects = Vec::with_capacity(batch);
    loop {
        let mut len = [0u8; 4];
        match file.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        let mut object = vec![0; u32::from_le_bytes(len) as usize];
        file.read_exact(&mut object).with_context(|| format!("reading {}", path.display()))?;
        objects.push(object);
        if objects.len() == batch {
            each(&objects)?;
            objects.clear();
        }
    }
    if !objects.is_empty() {
        each(&objects)?;
    }
    Ok(())
}
