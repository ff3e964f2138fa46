//! Gzip: stored values as standard gzip members, with one deflate state per thread.
//!
//! A fresh deflate encoder allocates a few hundred KB of tables; per object that costs more
//! than compressing a 1 KB object, so each thread keeps one compressor and one
//! decompressor and resets them between objects. Values are standard gzip members (RFC
//! 1952) that any gzip tool reads. Decoding is bounded by the length recorded beside the
//! value, so a damaged row can never make a read allocate or inflate without limit.

use std::cell::RefCell;

use super::inflate;
#[cfg(feature = "libdeflate")]
use super::scratch;
use crate::key::Key;
#[cfg(not(feature = "libdeflate"))]
use flate2::{Compress, Compression, Crc, FlushCompress};
#[cfg(not(feature = "libdeflate"))]
use flate2::{Decompress, FlushDecompress, Status};

/// The largest compression level gzip knows.
pub(crate) const MAX_LEVEL: u32 = 9;
/// The default level of the deflate backend in use: the fastest level whose ratio is
/// within 3% of the best of levels 1 to 6 on Speckle objects: libdeflate level 1 (on
/// `million --count 300000`, saving at 1.55x zlib-rs level 2's rate with 0.35% fewer bytes
/// stored: notes/design.md, "Codecs"), else level 2.
#[cfg(feature = "libdeflate")]
pub(crate) const DEFAULT_LEVEL: u32 = 1;
#[cfg(not(feature = "libdeflate"))]
pub(crate) const DEFAULT_LEVEL: u32 = 2;

const MAGIC: [u8; 2] = [0x1f, 0x8b];
const METHOD_DEFLATE: u8 = 8;
#[cfg(not(feature = "libdeflate"))]
const OS_UNKNOWN: u8 = 255;
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xe0;
/// Deflate cannot expand data more than 1032 to 1; a recorded length beyond that is a lie.
const MAX_DEFLATE_RATIO: usize = 1032;
/// Spare output room while inflating. zlib's fast decoding loop (zlib-rs: `inflate_fast`,
/// `INFLATE_FAST_MIN_LEFT`) only runs while at least 260 bytes of output room are left, so
/// that a longest match (258 bytes) never needs a bounds check; with room for exactly the
/// recorded length, the last 260 bytes of every object went through the slow loop. With
/// the slack, inflating a 1.25 KB object takes 0.86x to 0.91x the time and `get` at a
/// million objects runs 1.09x faster (notes/design.md); the spare room is
/// given back before returning.
#[cfg(not(feature = "libdeflate"))]
const INFLATE_SLACK: usize = 260;

thread_local! {
    #[cfg(not(feature = "libdeflate"))]
    static COMPRESSOR: RefCell<Option<(u32, Compress)>> = const { RefCell::new(None) };
    #[cfg(feature = "libdeflate")]
    static LIBDEFLATE: RefCell<Option<(u32, libdeflater::Compressor)>> =
        const { RefCell::new(None) };
    #[cfg(not(feature = "libdeflate"))]
    static DECOMPRESSOR: RefCell<Option<Decompress>> = const { RefCell::new(None) };
    #[cfg(feature = "libdeflate")]
    static LIBDEFLATE_INFLATE: RefCell<Option<libdeflater::Decompressor>> =
        const { RefCell::new(None) };
}

/// Gzips `raw` at `level` (0 to 9) with this thread's reusable libdeflate compressor: one
/// call for the whole object, header and trailer included.
#[cfg(feature = "libdeflate")]
pub(crate) fn compress(raw: &[u8], level: u32) -> Vec<u8> {
    LIBDEFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let compressor = match &mut *slot {
            Some((l, compressor)) if *l == level => compressor,
            _ => {
                let lvl = libdeflater::CompressionLvl::new(level.min(MAX_LEVEL) as i32)
                    .expect("levels 0 to 9 are libdeflate levels");
                &mut slot.insert((level, libdeflater::Compressor::new(lvl))).1
            }
        };
        let bound = compressor.gzip_compress_bound(raw.len());
        scratch::exact_output(bound, |out| {
            compressor.gzip_compress(raw, out).expect("the output buffer holds the compress bound")
        })
    })
}

/// Gzips `raw` at `level` (0 to 9) with this thread's reusable compressor.
#[cfg(not(feature = "libdeflate"))]
pub(crate) fn compress(raw: &[u8], level: u32) -> Vec<u8> {
    let xfl = match level {
        9 => 2,
        0 | 1 => 4,
        _ => 0,
    };
    let mut out = Vec::with_capacity(raw.len() / 2 + 64);
    out.extend_from_slice(&[MAGIC[0], MAGIC[1], METHOD_DEFLATE, 0, 0, 0, 0, 0, xfl, OS_UNKNOWN]);
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let deflate = match &mut *slot {
            Some((l, deflate)) if *l == level => {
                deflate.reset();
                deflate
            }
            _ => &mut slot.insert((level, Compress::new(Compression::new(level), false))).1,
        };
        let start_in = deflate.total_in();
        loop {
            let consumed = (deflate.total_in() - start_in) as usize;
            if out.capacity() - out.len() < 64 {
                // Grow by what the rest of the input may need, not by doubling: a large
                // incompressible object would otherwise hold twice its size.
                out.reserve_exact((raw.len() - consumed) / 2 + 1024);
            }
            let status = deflate
                .compress_vec(&raw[consumed..], &mut out, FlushCompress::Finish)
                .expect("deflate of an in-memory buffer with Finish cannot fail");
            if status == Status::StreamEnd {
                break;
            }
        }
    });
    let mut crc = Crc::new();
    crc.update(raw);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    // A row waits in memory for its commit: no spare room behind it.
    out.shrink_to_fit();
    out
}

/// The key of the object a gzip row holds, if its value decodes and matches the CRC of its
/// trailer: whatever else in the row is damaged, such a value is the object's bytes (a
/// damaged key is then told from damaged bytes). `None` for zstd rows and damaged values.
pub(crate) fn key_of_intact_gzip(raw_len: i64, stored: &[u8]) -> Option<Key> {
    let raw = decompress(stored, u64::try_from(raw_len).ok()?).ok()?;
    let trailer = stored.get(stored.len().checked_sub(8)?..stored.len() - 4)?;
    let mut crc = flate2::Crc::new();
    crc.update(&raw);
    (crc.sum().to_le_bytes() == trailer).then(|| Key::of(&raw))
}

/// Ungzips `stored`, which must hold exactly `raw_len` bytes once decoded.
///
/// The gzip CRC is not checked: every caller checks the blake3 hash of the result, which
/// catches everything the CRC would.
pub(crate) fn decompress(stored: &[u8], raw_len: u64) -> Result<Vec<u8>, String> {
    decompress_with(stored, raw_len, true)
}

/// [`decompress`], with this thread's kept tables (`inflate.rs`) first if `kept`, else by
/// the backend alone.
pub(super) fn decompress_with(stored: &[u8], raw_len: u64, kept: bool) -> Result<Vec<u8>, String> {
    let body = skip_header(stored)?;
    let raw_len = usize::try_from(raw_len).map_err(|_| "recorded length does not fit memory")?;
    if raw_len > stored.len().saturating_mul(MAX_DEFLATE_RATIO).saturating_add(1024) {
        return Err(format!(
            "recorded length {raw_len} is impossible for {} compressed bytes",
            stored.len()
        ));
    }
    let (stream, trailer) = body
        .split_at_checked(body.len().saturating_sub(8))
        .filter(|(_, trailer)| trailer.len() == 8)
        .ok_or_else(|| "gzip member is cut short".to_string())?;
    let size = u32::from_le_bytes(trailer[4..8].try_into().expect("slice of 4 bytes"));
    if size != raw_len as u32 {
        return Err(format!("gzip trailer records {size} bytes, {raw_len} recorded"));
    }
    if kept {
        // A stream the kept tables reject goes to the backend, which decides.
        if let Some(Ok(out)) = inflate::inflate_kept(stream, raw_len) {
            return Ok(out);
        }
    }
    let out = inflate(stream, raw_len)?;
    if out.len() != raw_len {
        return Err(format!("decodes to {} bytes, {raw_len} recorded", out.len()));
    }
    Ok(out)
}

/// Inflates the raw deflate `stream` of an object of `raw_len` bytes with this thread's
/// libdeflate decompressor, into a vector of exactly that length: 1.2x faster than
/// zlib-rs on Speckle objects (`experiments` `small_inflate`), most of a small member's
/// time being its Huffman tables. A stream that decodes to more than `raw_len` is an
/// error, never truncated.
#[cfg(feature = "libdeflate")]
fn inflate(stream: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0; raw_len];
    let n = LIBDEFLATE_INFLATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let inflate = slot.get_or_insert_with(libdeflater::Decompressor::new);
        inflate.deflate_decompress(stream, &mut out).map_err(|e| match e {
            libdeflater::DecompressionError::InsufficientSpace => {
                format!("decodes to more than the recorded {raw_len} bytes")
            }
            libdeflater::DecompressionError::BadData => "deflate stream is damaged".to_string(),
        })
    })?;
    out.truncate(n);
    Ok(out)
}

/// Inflates the raw deflate `stream` of an object of `raw_len` bytes with this thread's
/// zlib-rs (or miniz) decompressor. A stream that decodes to more than `raw_len`, or ends
/// before its final block, is an error, never truncated.
#[cfg(not(feature = "libdeflate"))]
fn inflate(stream: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    // The spare room also lets a stream that runs longer than recorded be caught, not
    // truncated.
    let mut out = Vec::with_capacity(raw_len + INFLATE_SLACK);
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let inflate = match &mut *slot {
            Some(inflate) => {
                inflate.reset(false);
                inflate
            }
            None => slot.insert(Decompress::new(false)),
        };
        loop {
            let before = (inflate.total_in(), out.len());
            let status = inflate
                .decompress_vec(
                    &stream[inflate.total_in() as usize..],
                    &mut out,
                    FlushDecompress::Finish,
                )
                .map_err(|e| format!("deflate stream is damaged: {e}"))?;
            if status == Status::StreamEnd {
                if inflate.total_in() as usize != stream.len() {
                    return Err("bytes follow the deflate stream".to_string());
                }
                return Ok(());
            }
            if out.len() > raw_len {
                return Err(format!("decodes to more than the recorded {raw_len} bytes"));
            }
            if (inflate.total_in(), out.len()) == before {
                return Err("deflate stream ends early".to_string());
            }
        }
    })?;
    out.shrink_to_fit();
    Ok(out)
}

/// Returns the deflate stream that follows a gzip header.
fn skip_header(stored: &[u8]) -> Result<&[u8], String> {
    let short = || "gzip header is cut short".to_string();
    if stored.len() < 18 || stored[..2] != MAGIC || stored[2] != METHOD_DEFLATE {
        return Err("not a gzip member".to_string());
    }
    let flags = stored[3];
    if flags & FRESERVED != 0 {
        return Err("gzip header has reserved flags set".to_string());
    }
    let mut rest = &stored[10..];
    if flags & FEXTRA != 0 {
        let len = usize::from(u16::from_le_bytes([
            *rest.first().ok_or_else(short)?,
            *rest.get(1).ok_or_else(short)?,
        ]));
        rest = rest.get(2 + len..).ok_or_else(short)?;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let end = rest.iter().position(|&b| b == 0).ok_or_else(short)?;
            rest = &rest[end + 1..];
        }
    }
    if flags & FHCRC != 0 {
        rest = rest.get(2..).ok_or_else(short)?;
    }
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8 ^ (i / 13) as u8).collect()
    }

    #[test]
    fn a_row_is_exactly_its_length() {
        // Rows wait in memory for their commit: no spare room behind them.
        for n in [0, 1_255, 300_000, 3 << 20] {
            let row = compress(&sample(n), 2);
            assert_eq!(row.capacity(), row.len(), "{n} bytes");
        }
    }

    #[test]
    fn round_trips_at_every_level_and_size() {
        for level in 0..=MAX_LEVEL {
            for n in [0, 1, 100, 1_000, 70_000, 300_000] {
                let raw = sample(n);
                let stored = compress(&raw, level);
                assert_eq!(decompress(&stored, n as u64).unwrap(), raw, "level {level} n {n}");
            }
        }
    }

    #[test]
    fn output_is_standard_gzip_both_ways() {
        let raw = sample(5_000);
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&compress(&raw, 6)[..]).read_to_end(&mut decoded).unwrap();
        assert_eq!(decoded, raw);

        let mut enc = flate2::GzBuilder::new()
            .filename("a.json")
            .comment("c")
            .extra(vec![1, 2, 3])
            .write(Vec::new(), flate2::Compression::new(6));
        enc.write_all(&raw).unwrap();
        let foreign = enc.finish().unwrap();
        assert_eq!(decompress(&foreign, raw.len() as u64).unwrap(), raw);
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let raw = sample(2_000);
        let stored = compress(&raw, 6);
        // Recorded lengths off by less and by more than the spare output room.
        let n = raw.len() as u64;
        // (520: twice zlib-rs's spare output room.)
        for recorded in [0, 1, n - 520, n - 100, n - 1, n + 1, n + 100] {
            let err = decompress(&stored, recorded).unwrap_err();
            assert!(err.contains("bytes"), "recorded {recorded}: {err}");
        }
        assert!(decompress(&stored, u64::MAX).is_err());
        assert_eq!(decompress(&stored, n).unwrap().capacity(), raw.len());
        for cut in [0, 5, 17, stored.len() / 2, stored.len() - 1] {
            assert!(decompress(&stored[..cut], raw.len() as u64).is_err(), "cut at {cut}");
        }
        let mut longer = stored.clone();
        longer.push(0);
        assert!(decompress(&longer, raw.len() as u64).is_err());
        for i in 0..stored.len() {
            let mut bad = stored.clone();
            bad[i] ^= 0x55;
            // A flip may still decode (the hash check above this layer catches that);
            // it must never panic or return more than the recorded length.
            if let Ok(out) = decompress(&bad, raw.len() as u64) {
                assert_eq!(out.len(), raw.len());
            }
        }
    }
}
