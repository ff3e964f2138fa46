//! Outputs of exactly their length, written through a reusable buffer per thread.

use std::cell::RefCell;

/// Bounds of output small enough to be written into a reusable scratch buffer per thread.
const SCRATCH_BYTES: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `write`, which fills a buffer of `bound` bytes and says how many it wrote, and
/// returns those bytes in a vector of exactly their length.
///
/// A compressed row lives in memory until its batch commits, beside tens of thousands of
/// others: a vector of the compress bound (twice the stored bytes and more) shrunk in place
/// leaves its tail as a hole in the allocator's heap, so small outputs are written into a
/// scratch buffer of the thread's and copied out at their size. Large outputs (which the
/// scratch buffer must not keep alive) get a vector of their own, truncated and shrunk.
pub(crate) fn exact_output(bound: usize, write: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    if bound > SCRATCH_BYTES {
        let mut out = vec![0u8; bound];
        let written = write(&mut out);
        out.truncate(written);
        out.shrink_to_fit();
        return out;
    }
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        if scratch.len() < bound {
            scratch.resize(bound, 0);
        }
        let written = write(&mut scratch[..bound]);
        scratch[..written].to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `n` bytes of 7 into a buffer of `bound`.
    fn fill(bound: usize, n: usize) -> Vec<u8> {
        exact_output(bound, |out| {
            assert_eq!(out.len(), bound);
            out[..n].fill(7);
            n
        })
    }

    #[test]
    fn small_and_large_outputs_keep_no_spare_room() {
        for (bound, n) in [(1_300, 620), (100, 0), (SCRATCH_BYTES + 1, 1_000), (1_300, 1_300)] {
            let out = fill(bound, n);
            assert_eq!(out, vec![7u8; n]);
            assert_eq!(out.capacity(), n, "bound {bound}");
        }
    }

    #[test]
    fn a_large_output_leaves_the_scratch_buffer_small() {
        fill(SCRATCH_BYTES * 4, 10);
        let kept = SCRATCH.with(|cell| cell.borrow().capacity());
        assert!(kept <= SCRATCH_BYTES, "{kept}");
    }
}
