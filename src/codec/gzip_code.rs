//! One deflate code for the small objects of a stash, trained on its first objects.
//!
//! A gzip member of a small object spends a third of its inflate building the Huffman
//! tables its dynamic block describes (notes/experiments.md). A stash's objects are alike
//! (Speckle objects are JSON with the same property names), so one code trained on a
//! sample of them serves them all: each member still carries the code in its block header,
//! as every dynamic block does, so it is a standard gzip member any tool reads, and since
//! the header is the same bits in every member, a reader keeps the tables built for it
//! (`inflate.rs`). The code is the stash's (the meta table's `gzip_code`, written once: `db/meta.rs`), so
//! every handle and process that saves into it sends the same header.
//!
//! The encoder is a greedy LZ77 parse with hash chains (about libdeflate level 1's
//! matches), then the tokens in the trained code in one final block. An object with a byte
//! the code has no symbol for (one the sample never held), or larger than
//! [`MAX_OBJECT`], is gzipped by the codec's backend instead.

use std::cell::RefCell;

use crate::codec::inflate::canonical_codes;
use crate::codec::inflate::{CODE_LENGTH_ORDER, DIST_BASE, DIST_EXTRA, LENGTH_BASE, LENGTH_EXTRA};

/// Objects larger than this are gzipped with codes of their own: their tables are a small
/// part of their inflate, and a code of their own compresses them better.
pub(crate) const MAX_OBJECT: usize = 16 << 10;
/// Objects sampled before training, and the bytes that also end the sample.
pub(crate) const SAMPLE_OBJECTS: usize = 2_000;
pub(crate) const SAMPLE_BYTES: usize = 2 << 20;
/// Literal/length and distance symbols: the lengths a code is stored as.
const LITLEN_SYMBOLS: usize = 286;
const DIST_SYMBOLS: usize = 30;
/// The longest code deflate allows, and the longest code-length code.
const MAX_BITS: u8 = 15;
const MAX_CL_BITS: u8 = 7;
/// Positions a match is looked for at: about libdeflate level 1's parse.
const PROBES: usize = 1;
const HASH_BITS: u32 = 14;
const WINDOW: usize = 32 << 10;
const MIN_MATCH: usize = 3;
const MAX_MATCH: usize = 258;

/// A trained code: its lengths, its codes, and its block header (a final dynamic block's
/// first bits: values and their widths).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GzipCode {
    lengths: Vec<u8>,
    codes: Vec<u32>,
    header: Vec<(u32, u32)>,
}

impl GzipCode {
    /// The code of `samples`' LZ77 tokens: every length and distance symbol gets a code
    /// (any match can be sent), literals those the sample holds. `None` for an empty
    /// sample.
    pub(crate) fn train<S: AsRef<[u8]>>(samples: &[S]) -> Option<Self> {
        let mut freqs = vec![0u64; LITLEN_SYMBOLS + DIST_SYMBOLS];
        let mut any = false;
        PARSER.with(|p| {
            let mut parser = p.borrow_mut();
            for sample in samples.iter().map(AsRef::as_ref).filter(|s| s.len() <= MAX_OBJECT) {
                any = true;
                parser.parse(sample, |token| match token {
                    Token::Literal(b) => freqs[usize::from(b)] += 1,
                    Token::Match(len, dist) => {
                        freqs[length_symbol(len).0] += 1;
                        freqs[LITLEN_SYMBOLS + dist_symbol(dist).0] += 1;
                    }
                });
            }
        });
        if !any {
            return None;
        }
        for f in &mut freqs[256..] {
            *f = (*f).max(1);
        }
        let mut lengths = huffman_lengths(&freqs[..LITLEN_SYMBOLS], MAX_BITS);
        lengths.extend(huffman_lengths(&freqs[LITLEN_SYMBOLS..], MAX_BITS));
        Some(Self::from_lengths(lengths).expect("a Huffman code is a valid code"))
    }

    /// The code's lengths, literal/length symbols then distance symbols: what the stash
    /// stores (`db/meta.rs`) and [`GzipCode::from_lengths`] takes back.
    pub(crate) fn lengths(&self) -> &[u8] {
        &self.lengths
    }

    /// The code of `lengths` (286 literal/length lengths, then 30 distance lengths, as
    /// the meta table stores them, a hexadecimal digit each), checked: a complete code of at most 15 bits
    /// that can send an end of block, every length and every distance.
    pub(crate) fn from_lengths(lengths: Vec<u8>) -> std::result::Result<Self, String> {
        if lengths.len() != LITLEN_SYMBOLS + DIST_SYMBOLS {
            return Err(format!(
                "{} code lengths, not {}",
                lengths.len(),
                LITLEN_SYMBOLS + DIST_SYMBOLS
            ));
        }
        if lengths.iter().any(|&l| l > MAX_BITS) || lengths[256..].contains(&0) {
            return Err("code lengths beyond 15 bits, or a symbol it must send without one".into());
        }
        let (litlen, dist) = lengths.split_at(LITLEN_SYMBOLS);
        let complete = |l: &[u8]| {
            l.iter().filter(|&&l| l > 0).map(|&l| 1u64 << (MAX_BITS - l)).sum::<u64>()
                == 1 << MAX_BITS
        };
        if !complete(litlen) || !complete(dist) {
            return Err("code lengths that are not a complete code".into());
        }
        let mut codes = canonical_codes(litlen).ok_or("an over-subscribed code")?;
        codes.extend(canonical_codes(dist).ok_or("an over-subscribed code")?);
        let header = header(litlen, dist);
        Ok(Self { lengths, codes, header })
    }

    /// `raw` as a gzip member in this code, exactly its length; `None` when it is larger
    /// than [`MAX_OBJECT`] or has a byte the code cannot send.
    pub(crate) fn encode(&self, raw: &[u8]) -> Option<Vec<u8>> {
        if raw.len() > MAX_OBJECT {
            return None;
        }
        let mut w = BitWriter::with_capacity(raw.len() / 2 + 128);
        w.out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
        for &(value, bits) in &self.header {
            w.put(value, bits);
        }
        let mut sendable = true;
        PARSER.with(|p| {
            p.borrow_mut().parse(raw, |token| match token {
                Token::Literal(b) => {
                    let b = usize::from(b);
                    sendable &= self.lengths[b] > 0;
                    w.put(self.codes[b], self.lengths[b].into());
                }
                Token::Match(len, dist) => {
                    let (s, value, bits) = length_symbol(len);
                    w.put(self.codes[s], self.lengths[s].into());
                    w.put(value, bits);
                    let (s, value, bits) = dist_symbol(dist);
                    let s = LITLEN_SYMBOLS + s;
                    w.put(self.codes[s], self.lengths[s].into());
                    w.put(value, bits);
                }
            });
        });
        if !sendable {
            return None;
        }
        w.put(self.codes[256], self.lengths[256].into());
        let mut out = w.finish();
        out.reserve_exact(8);
        out.extend_from_slice(&crc32(raw).to_le_bytes());
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.shrink_to_fit();
        Some(out)
    }
}

/// The CRC-32 of a gzip trailer: libdeflate's (folding with carry-less multiplies) where
/// it is built in.
#[cfg(feature = "libdeflate")]
fn crc32(raw: &[u8]) -> u32 {
    libdeflater::crc32(raw)
}

#[cfg(not(feature = "libdeflate"))]
fn crc32(raw: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(raw);
    crc.sum()
}

/// An LZ77 token: a literal, or a match of a length (3 to 258) at a distance.
#[derive(Clone, Copy)]
enum Token {
    Literal(u8),
    Match(u16, u16),
}

thread_local! {
    static PARSER: RefCell<Parser> = RefCell::new(Parser::default());
}

/// Hash chains reused between objects: a head holds a position plus `base`, so that
/// entries of earlier objects (below `base`) read as empty without clearing the table.
#[derive(Default)]
struct Parser {
    head: Vec<u32>,
    prev: Vec<u32>,
    base: u32,
}

impl Parser {
    /// Calls `emit` with the greedy parse of `data` (at most [`MAX_OBJECT`] bytes).
    fn parse(&mut self, data: &[u8], mut emit: impl FnMut(Token)) {
        if self.head.is_empty() || self.base as usize > u32::MAX as usize - 2 * MAX_OBJECT {
            self.head = vec![0; 1 << HASH_BITS];
            self.base = 1;
        }
        let base = self.base;
        self.base += data.len() as u32 + 1;
        self.prev.resize(data.len(), 0);
        let hash = |i: usize| {
            let v = u32::from_le_bytes([data[i], data[i + 1], data[i + 2], 0]);
            (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
        };
        let (head, prev) = (&mut self.head, &mut self.prev);
        let insert = |i: usize, head: &mut [u32], prev: &mut [u32]| {
            if i + MIN_MATCH <= data.len() {
                let h = hash(i);
                prev[i] = head[h];
                head[h] = base + i as u32;
            }
        };
        let mut i = 0;
        while i < data.len() {
            let (mut best_len, mut best_dist) = (0, 0);
            if i + MIN_MATCH <= data.len() {
                let max = (data.len() - i).min(MAX_MATCH);
                let mut cand = head[hash(i)];
                for _ in 0..PROBES {
                    if cand < base {
                        break;
                    }
                    let at = (cand - base) as usize;
                    if i - at > WINDOW {
                        break;
                    }
                    let len = match_len(&data[at..], &data[i..i + max]);
                    if len > best_len {
                        (best_len, best_dist) = (len, i - at);
                        if len == max {
                            break;
                        }
                    }
                    cand = prev[at];
                }
            }
            if best_len >= MIN_MATCH {
                emit(Token::Match(best_len as u16, best_dist as u16));
                for j in i..i + best_len {
                    insert(j, head, prev);
                }
                i += best_len;
            } else {
                emit(Token::Literal(data[i]));
                insert(i, head, prev);
                i += 1;
            }
        }
    }
}

/// How many bytes `a` and `b` (the shorter) have in common from the start.
fn match_len(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    while n + 8 <= b.len() {
        let x = u64::from_le_bytes(a[n..n + 8].try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(b[n..n + 8].try_into().expect("8 bytes"));
        if x != 0 {
            return n + (x.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + a[n..].iter().zip(&b[n..]).take_while(|(x, y)| x == y).count()
}

/// A length's symbol (257 to 285), and its extra bits' value and width.
fn length_symbol(len: u16) -> (usize, u32, u32) {
    let i = LENGTH_BASE.partition_point(|&b| b <= len) - 1;
    (257 + i, u32::from(len - LENGTH_BASE[i]), LENGTH_EXTRA[i].into())
}

/// A distance's symbol (0 to 29), and its extra bits' value and width.
fn dist_symbol(dist: u16) -> (usize, u32, u32) {
    let i = DIST_BASE.partition_point(|&b| b <= dist) - 1;
    (i, u32::from(dist - DIST_BASE[i]), DIST_EXTRA[i].into())
}

/// Huffman code lengths of `freqs` of at most `limit` bits; symbols of frequency 0 get
/// none. Frequencies are halved (kept above 0) until the longest code fits.
fn huffman_lengths(freqs: &[u64], limit: u8) -> Vec<u8> {
    let mut freqs = freqs.to_vec();
    loop {
        let lengths = huffman(&freqs);
        if lengths.iter().all(|&l| l <= limit) {
            return lengths;
        }
        for f in freqs.iter_mut().filter(|f| **f > 0) {
            *f = (*f / 2).max(1);
        }
    }
}

fn huffman(freqs: &[u64]) -> Vec<u8> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut parent = Vec::new();
    let mut heap = BinaryHeap::new();
    let mut leaf = vec![None; freqs.len()];
    for (s, &f) in freqs.iter().enumerate().filter(|(_, f)| **f > 0) {
        leaf[s] = Some(parent.len());
        heap.push(Reverse((f, parent.len())));
        parent.push(usize::MAX);
    }
    if heap.len() == 1 {
        // One symbol still needs a one-bit code.
        return freqs.iter().map(|&f| u8::from(f > 0)).collect();
    }
    while heap.len() > 1 {
        let Reverse((fa, a)) = heap.pop().expect("two nodes");
        let Reverse((fb, b)) = heap.pop().expect("two nodes");
        parent[a] = parent.len();
        parent[b] = parent.len();
        heap.push(Reverse((fa + fb, parent.len())));
        parent.push(usize::MAX);
    }
    leaf.iter()
        .map(|node| {
            let Some(mut at) = *node else { return 0 };
            let mut depth = 0;
            while parent[at] != usize::MAX {
                at = parent[at];
                depth += 1;
            }
            depth
        })
        .collect()
}

/// Writes bits least significant first.
struct BitWriter {
    out: Vec<u8>,
    buf: u64,
    count: u32,
}

impl BitWriter {
    fn with_capacity(bytes: usize) -> Self {
        Self { out: Vec::with_capacity(bytes), buf: 0, count: 0 }
    }

    fn put(&mut self, value: u32, bits: u32) {
        self.buf |= u64::from(value) << self.count;
        self.count += bits;
        if self.count >= 32 {
            self.out.extend_from_slice(&(self.buf as u32).to_le_bytes());
            self.buf >>= 32;
            self.count -= 32;
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let bytes = self.count.div_ceil(8) as usize;
        self.out.extend_from_slice(&self.buf.to_le_bytes()[..bytes]);
        self.out
    }
}

/// The header of a final dynamic block in the code of `litlen` and `dist`: its values and
/// their widths.
fn header(litlen: &[u8], dist: &[u8]) -> Vec<(u32, u32)> {
    let hlit = litlen.iter().rposition(|&l| l > 0).expect("an end of block") + 1;
    let hdist = dist.iter().rposition(|&l| l > 0).map_or(1, |last| last + 1);
    let all: Vec<u8> = litlen[..hlit].iter().chain(&dist[..hdist]).copied().collect();
    // The lengths run-length coded: (symbol, extra value, extra bits).
    let mut runs: Vec<(usize, u32, u32)> = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let v = all[i];
        let run = all[i..].iter().take_while(|&&x| x == v).count();
        let mut left = run;
        if v == 0 {
            while left >= 11 {
                let n = left.min(138);
                runs.push((18, n as u32 - 11, 7));
                left -= n;
            }
            if left >= 3 {
                runs.push((17, left as u32 - 3, 3));
                left = 0;
            }
        } else {
            runs.push((usize::from(v), 0, 0));
            left -= 1;
            while left >= 3 {
                let n = left.min(6);
                runs.push((16, n as u32 - 3, 2));
                left -= n;
            }
        }
        runs.extend(std::iter::repeat_n((usize::from(v), 0, 0), left));
        i += run;
    }
    let mut freqs = [0u64; 19];
    for &(s, _, _) in &runs {
        freqs[s] += 1;
    }
    let cl = huffman_lengths(&freqs, MAX_CL_BITS);
    let cl_codes = canonical_codes(&cl).expect("a Huffman code");
    let hclen = (CODE_LENGTH_ORDER.iter().rposition(|&s| cl[s] > 0).expect("a code") + 1).max(4);
    // BFINAL 1, BTYPE 2 (dynamic), HLIT, HDIST, HCLEN.
    let mut out = vec![(1, 1), (2, 2), (hlit as u32 - 257, 5), (hdist as u32 - 1, 5)];
    out.push((hclen as u32 - 4, 4));
    out.extend(CODE_LENGTH_ORDER[..hclen].iter().map(|&s| (u32::from(cl[s]), 3)));
    for (s, value, bits) in runs {
        out.push((cl_codes[s], cl[s].into()));
        if bits > 0 {
            out.push((value, bits));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn objects(start: u64, count: usize) -> Vec<Vec<u8>> {
        speckle_gen::objects(7, start, count)
    }

    fn gunzip(member: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(member).read_to_end(&mut out).expect("a gzip member");
        out
    }

    #[test]
    fn members_are_standard_gzip_that_share_one_header() {
        let code = GzipCode::train(&objects(0, 500)).expect("a sample");
        let mut first_bytes = std::collections::HashSet::new();
        for raw in objects(500, 300) {
            let member = code.encode(&raw).expect("every byte of a Speckle object has a code");
            // A standard member, CRC checked, exactly its length.
            assert_eq!(gunzip(&member), raw);
            assert_eq!(member.capacity(), member.len());
            first_bytes.insert(member[10..40].to_vec());
        }
        assert_eq!(first_bytes.len(), 1, "one header for every member");
    }

    #[test]
    fn objects_it_cannot_send_are_refused() {
        let code = GzipCode::train(&[b"{\"a\":1}".repeat(40)]).expect("a sample");
        assert!(code.encode(b"{\"a\":1}{\"a\":11}").is_some());
        assert_eq!(code.encode(b"{\"z\":1}"), None, "z was never sampled");
        assert_eq!(code.encode(&vec![b'a'; MAX_OBJECT + 1]), None);
        assert_eq!(GzipCode::train::<Vec<u8>>(&[]), None);
        // Empty objects and every match length and distance are sendable.
        assert_eq!(gunzip(&code.encode(b"").expect("empty")), b"");
        let mut long = b"{\"a\":1}".repeat(1_000);
        long.truncate(MAX_OBJECT);
        assert_eq!(gunzip(&code.encode(&long).expect("matches only")), long);
    }

    #[test]
    fn symbols_and_lengths_match_deflate() {
        for len in 3..=258u16 {
            let (s, value, bits) = length_symbol(len);
            let i = s - 257;
            assert_eq!(LENGTH_BASE[i] + value as u16, len);
            assert!(value < 1 << bits || (bits == 0 && value == 0));
        }
        assert_eq!(length_symbol(258).0, 285);
        for dist in 1..=32_768u16 {
            let (s, value, bits) = dist_symbol(dist);
            assert_eq!(DIST_BASE[s] + value as u16, dist);
            assert!(value < 1 << bits || (bits == 0 && value == 0));
        }
        let lengths = huffman_lengths(&(1..=300u64).map(|i| i * i * i).collect::<Vec<_>>(), 15);
        assert!(lengths.iter().all(|&l| (1..=15).contains(&l)));
        let kraft: f64 = lengths.iter().map(|&l| 0.5f64.powi(l.into())).sum();
        assert!((kraft - 1.0).abs() < 1e-9, "a complete code: {kraft}");
    }
}
