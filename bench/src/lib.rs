//! Helpers shared by the benchmark programs of `src/bin/`; the criterion benchmarks live
//! in `benches/`.

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
