//! Small objects gzipped with deflate's fixed Huffman codes (RFC 1951, 3.2.6), which a read
//! inflates without building tables.
//!
//! A deflate block with dynamic codes carries its code lengths, and every inflate of it
//! builds its decoding tables from them: for an object of 700 bytes that is a third of
//! inflating it, the same ~1 µs whatever the object's size. A block with the fixed codes
//! carries none, and a decompressor kept for such blocks keeps the fixed tables built
//! between calls (`codec.rs`). The cost is bytes: the fixed codes fit no object's own
//! statistics, so a member is 1.3x-1.4x the dynamic one. Up to [`MAX_RAW`] bytes a read
//! (inflate and hash) is 1.4x-1.65x faster for that; beyond, the tables are a small part of
//! the inflate and the bytes are not worth it (`experiments` `fixed_huffman`,
//! notes/experiments.md). The output is a standard gzip member like any other row's.

use std::cell::RefCell;

use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Method, Status, Strategy};

use crate::scratch;

/// The largest object gzipped with the fixed codes: a 2 KiB object reads ~1.3x faster with
/// them, a 5 KiB one 1.15x, for 1.4x-1.5x its bytes (notes/experiments.md).
pub(crate) const MAX_RAW: usize = 2048;
/// zlib's window bits, plus 16 for a gzip header and trailer.
const GZIP_WINDOW_BITS: i32 = 15 + 16;

thread_local! {
    static DEFLATE: RefCell<Option<Deflate>> = const { RefCell::new(None) };
}

/// `raw` as a gzip member of one fixed-code block, by this thread's reusable zlib-rs
/// state; `None` if it did not fit the room given (the caller then gzips it as any
/// other object).
pub(crate) fn compress(raw: &[u8]) -> Option<Vec<u8>> {
    DEFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let deflate = slot.get_or_insert_with(|| {
            Deflate::new_with_config(DeflateConfig {
                level: 1,
                method: Method::Deflated,
                window_bits: GZIP_WINDOW_BITS,
                mem_level: 8,
                strategy: Strategy::Fixed,
            })
        });
        deflate.reset();
        // A fixed code is at most 9 bits a byte; the header, the trailer and the block's
        // few bits fit the rest.
        let room = raw.len() + raw.len() / 8 + 64;
        let mut ended = false;
        let out = scratch::exact_output(room, |out| {
            let before = deflate.total_out();
            ended =
                matches!(deflate.compress(raw, out, DeflateFlush::Finish), Ok(Status::StreamEnd));
            (deflate.total_out() - before) as usize
        });
        ended.then_some(out)
    })
}
