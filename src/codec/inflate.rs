//! A deflate decoder (RFC 1951) that keeps the Huffman tables of the codes it meets
//! again and again. A dynamic block carries its code's lengths, and inflating it first
//! builds decoding tables from them: for a member of a few hundred bytes that is a third of
//! inflating it (libdeflate's `build_decode_table`, notes/experiments.md). When a stash's
//! rows share one trained code (`gzip_code.rs`), every member's header is the same bits, so
//! a thread that keeps the tables built for a header decodes the next member with that
//! header without building any. Everything else is inflated by the codec's backend
//! (`codec.rs`), which also decides any stream this decoder rejects.
//!
//! Safe Rust: every index is checked; a damaged stream is an error, never a panic, and
//! never writes past the object's recorded length.

use std::cell::RefCell;

type Result<T> = std::result::Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $why:expr) => {
        if !$cond {
            return Err($why.to_string());
        }
    };
}
macro_rules! bail {
    ($why:expr) => {
        return Err($why.to_string())
    };
}

/// Bits of a code looked up at once in the first level of each table.
const LITLEN_BITS: u32 = 11;
const DIST_BITS: u32 = 8;

// An entry of a table: bits 0-7 the bits it consumes, 8-11 its kind, 12-15 its extra bits
// (or a subtable's bits), 16-31 its value (the literal, the base length or distance, or
// where its subtable starts). A literal entry of the first level may stand for two
// literals whose codes fit in its bits together (`pair_literals`): then its extra bits are
// 1 and its value the two bytes, the first in bits 16-23.
const LITERAL: u32 = 1;
const MATCH: u32 = 2;
const SUBTABLE: u32 = 4;
const END: u32 = 8;
const INVALID: u32 = 0;

pub(crate) const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
pub(crate) const LENGTH_EXTRA: [u8; 29] =
    [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
pub(crate) const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
pub(crate) const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// The order in which a dynamic header gives the code-length code's lengths.
pub(crate) const CODE_LENGTH_ORDER: [usize; 19] =
    [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

fn entry(bits: u32, kind: u32, extra: u32, value: u32) -> u32 {
    bits | kind << 8 | extra << 12 | value << 16
}

/// A length/literal symbol's entry without its bits.
fn litlen_payload(symbol: usize) -> u32 {
    match symbol {
        0..=255 => entry(0, LITERAL, 0, symbol as u32),
        256 => entry(0, END, 0, 0),
        257..=285 => {
            let i = symbol - 257;
            entry(0, MATCH, LENGTH_EXTRA[i].into(), LENGTH_BASE[i].into())
        }
        _ => entry(0, INVALID, 0, 0),
    }
}

fn dist_payload(symbol: usize) -> u32 {
    match symbol {
        0..=29 => entry(0, MATCH, DIST_EXTRA[symbol].into(), DIST_BASE[symbol].into()),
        _ => entry(0, INVALID, 0, 0),
    }
}

/// The canonical codes of `lengths` (RFC 1951, 3.2.2), each bit-reversed, as deflate sends
/// them least significant bit first; `None` for a code with more codes than its lengths
/// allow.
pub(crate) fn canonical_codes(lengths: &[u8]) -> Option<Vec<u32>> {
    let mut count = [0u32; 16];
    for &l in lengths {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut left = 1i64;
    for &c in &count[1..] {
        left = left * 2 - i64::from(c);
        if left < 0 {
            return None;
        }
    }
    let mut next = [0u32; 16];
    let mut code = 0;
    for bits in 1..16 {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    Some(
        lengths
            .iter()
            .map(|&l| {
                if l == 0 {
                    return 0;
                }
                let c = next[l as usize];
                next[l as usize] += 1;
                c.reverse_bits() >> (32 - u32::from(l))
            })
            .collect(),
    )
}

/// Builds a two-level table: `primary` bits looked up first, longer codes through
/// subtables.
fn build(lengths: &[u8], primary: u32, payload: fn(usize) -> u32) -> Result<Vec<u32>> {
    let Some(codes) = canonical_codes(lengths) else { bail!("an over-subscribed code") };
    let mask = (1u32 << primary) - 1;
    let mut longest = vec![0u32; 1 << primary];
    for (&l, &c) in lengths.iter().zip(&codes) {
        let l = u32::from(l);
        if l > primary {
            let p = &mut longest[(c & mask) as usize];
            *p = (*p).max(l);
        }
    }
    let mut table = vec![entry(0, INVALID, 0, 0); 1 << primary];
    for (prefix, &l) in longest.iter().enumerate() {
        if l > 0 {
            let bits = l - primary;
            table[prefix] = entry(primary, SUBTABLE, bits, table.len() as u32);
            table.resize(table.len() + (1 << bits), entry(0, INVALID, 0, 0));
        }
    }
    for (symbol, (&l, &c)) in lengths.iter().zip(&codes).enumerate() {
        let l = u32::from(l);
        if l == 0 {
            continue;
        }
        let e = payload(symbol);
        if l <= primary {
            for k in 0..1u32 << (primary - l) {
                table[(c | k << l) as usize] = e | l;
            }
        } else {
            let sub = table[(c & mask) as usize];
            let (start, bits) = (sub >> 16, (sub >> 12) & 0xf);
            let rest = l - primary;
            for k in 0..1u32 << (bits - rest) {
                table[(start + ((c >> primary) | k << rest)) as usize] = e | rest;
            }
        }
    }
    Ok(table)
}

/// Reads bits least significant first, 56 or more at a time.
struct Bits<'a> {
    input: &'a [u8],
    pos: usize,
    buf: u64,
    count: u32,
    /// Zero bytes read past the end.
    past_end: usize,
}

impl Bits<'_> {
    #[inline(always)]
    fn refill(&mut self) {
        if let Some(word) = self.input.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            self.buf |= word << self.count;
            self.pos += ((63 - self.count) >> 3) as usize;
            self.count |= 56;
        } else {
            while self.count <= 56 {
                match self.input.get(self.pos) {
                    Some(&b) => self.buf |= u64::from(b) << self.count,
                    None => self.past_end += 1,
                }
                self.pos += 1;
                self.count += 8;
            }
        }
    }

    #[inline(always)]
    fn take(&mut self, n: u32) -> u32 {
        let v = (self.buf & ((1u64 << n) - 1)) as u32;
        self.buf >>= n;
        self.count -= n;
        v
    }

    /// Looks up the next symbol in `table`, consuming its bits.
    #[inline(always)]
    fn symbol(&mut self, table: &[u32], primary: u32) -> u32 {
        let mut e = table[(self.buf & ((1 << primary) - 1)) as usize];
        if (e >> 8) & 0xf == SUBTABLE {
            self.take(primary);
            let bits = (e >> 12) & 0xf;
            e = table[((e >> 16) + (self.buf as u32 & ((1 << bits) - 1))) as usize];
        }
        self.take(e & 0xff);
        e
    }

    /// The bit position in the input of the next bit not consumed.
    fn bit_position(&self) -> usize {
        // Zero bytes read past the end are in both `pos` and `count`.
        self.pos * 8 - self.count as usize
    }
}

/// Tables built for one code.
struct Code {
    litlen: Vec<u32>,
    dist: Vec<u32>,
}

impl Code {
    fn new(litlen: &[u8], dist: &[u8]) -> Result<Self> {
        let mut litlen = build(litlen, LITLEN_BITS, litlen_payload)?;
        pair_literals(&mut litlen);
        Ok(Self { litlen, dist: build(dist, DIST_BITS, dist_payload)? })
    }
}

/// Makes each first-level literal entry whose bits leave room for the next literal's whole
/// code an entry of both: in a stash's objects most literals are the digits of ids, codes
/// of 4 to 6 bits, so a lookup yields two bytes where it yielded one (the lookups of a
/// member are a chain, each waiting for the bits the one before consumed).
fn pair_literals(table: &mut [u32]) {
    let single = table[..1 << LITLEN_BITS].to_vec();
    let literal = |e: u32| (e >> 8) & 0xf == LITERAL;
    for (i, slot) in table[..1 << LITLEN_BITS].iter_mut().enumerate() {
        let first = single[i];
        if !literal(first) {
            continue;
        }
        let used = first & 0xff;
        // The entry at the bits after the first code: its code is whole within them when
        // it is no longer than they are.
        let second = single[i >> used];
        if literal(second) && used + (second & 0xff) <= LITLEN_BITS {
            let bytes = (first >> 16) | (second >> 16) << 8;
            *slot = entry(used + (second & 0xff), LITERAL, 1, bytes);
        }
    }
}

/// Writes the literal or two of entry `e` at `op`; returns where the next byte goes.
#[inline(always)]
fn put_literals(out: &mut [u8], op: usize, e: u32) -> Result<usize> {
    let n = 1 + ((e >> 12) & 1) as usize;
    if let Some(two) = out.get_mut(op..op + 2) {
        // The second byte of a single literal is overwritten by what follows it: a stream
        // that ends without filling the object is an error.
        two[0] = (e >> 16) as u8;
        two[1] = (e >> 24) as u8;
    } else {
        ensure!(op + n <= out.len(), "a stream longer than its object");
        out[op] = (e >> 16) as u8;
    }
    Ok(op + n)
}

/// Codes whose tables a thread keeps.
const KEPT: usize = 4;
/// Bytes of a stream that tell a repeated code from another on a miss.
const FINGERPRINT: usize = 64;

/// A code whose tables are kept: its header's bytes from the block's first bit (the last
/// byte masked to the header's bits) and its length in bits.
struct Kept {
    header: Vec<u8>,
    bits: usize,
    code: Code,
}

/// The codes this thread keeps tables for, newest first, and the fingerprint of the last
/// stream that matched none.
#[derive(Default)]
struct KeptCodes {
    codes: Vec<Kept>,
    last_miss: Option<u64>,
}

thread_local! {
    static KEPT_CODES: RefCell<KeptCodes> = RefCell::new(KeptCodes::default());
}

/// Inflates the raw deflate `stream` of an object of `raw_len` bytes, if its first block is a dynamic block whose code this thread keeps tables for; `None` if not,
/// for the caller to inflate it otherwise. The tables of a code are kept from the second
/// stream in a row that misses with the same first bytes (the same header, in a stash
/// whose rows share a trained code, `gzip_code.rs`); rows with codes of their own each
/// miss once and cost a fingerprint.
pub(crate) fn inflate_kept(stream: &[u8], raw_len: usize) -> Option<Result<Vec<u8>>> {
    // BTYPE of the first block: 2 is a dynamic block.
    if stream.len() < FINGERPRINT || (stream[0] >> 1) & 3 != 2 {
        return None;
    }
    KEPT_CODES.with(|cell| {
        let mut kept = cell.borrow_mut();
        let found = kept.codes.iter().position(|k| same_bits(stream, &k.header, k.bits));
        let at = match found {
            Some(at) => at,
            None => {
                let fingerprint = fingerprint(&stream[..FINGERPRINT]);
                if kept.last_miss.replace(fingerprint) != Some(fingerprint) {
                    return None;
                }
                kept.last_miss = None;
                let learned = match learn(stream) {
                    Ok(learned) => learned,
                    Err(e) => return Some(Err(e)),
                };
                if kept.codes.len() == KEPT {
                    kept.codes.pop();
                }
                kept.codes.insert(0, learned);
                0
            }
        };
        let k = &kept.codes[at];
        let mut out = vec![0; raw_len];
        Some(inflate_with(stream, &mut out, k.bits, &k.code).map(|()| out))
    })
}

/// The code of the dynamic block `stream` starts with, its tables built.
fn learn(stream: &[u8]) -> Result<Kept> {
    let mut bits = Bits { input: stream, pos: 0, buf: 0, count: 0, past_end: 0 };
    bits.refill();
    bits.take(3);
    let (litlen, dist) = read_header(&mut bits)?;
    ensure!(bits.past_end * 8 <= bits.count as usize, "a truncated header");
    let len = bits.bit_position();
    let mut header = stream[..len.div_ceil(8)].to_vec();
    if !len.is_multiple_of(8) {
        *header.last_mut().expect("a header") &= (1u8 << (len % 8)) - 1;
    }
    Ok(Kept { header, bits: len, code: Code::new(&litlen, &dist)? })
}

/// A hash of `bytes` (FNV-1a): which stream missed last.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Inflates `stream`, whose first block is a dynamic block with `code` and a header of
/// `header_bits`, into `out`; later blocks, if any, are decoded with tables built for them.
fn inflate_with(stream: &[u8], out: &mut [u8], header_bits: usize, code: &Code) -> Result<()> {
    let last_block = stream[0] & 1 == 1;
    let mut bits = Bits { input: stream, pos: header_bits / 8, buf: 0, count: 0, past_end: 0 };
    bits.refill();
    bits.take((header_bits % 8) as u32);
    let op = decode(&mut bits, code, out, 0)?;
    ensure!(bits.past_end * 8 <= bits.count as usize, "a truncated stream");
    if last_block {
        ensure!(op == out.len(), "a stream shorter than its object");
        ensure!(bits.bit_position().div_ceil(8) == stream.len(), "bytes after the stream");
        return Ok(());
    }
    inflate_rest(bits, out, op)
}

/// Decodes the blocks that follow one already decoded, up to the last.
fn inflate_rest(mut bits: Bits, out: &mut [u8], mut op: usize) -> Result<()> {
    let input = bits.input;
    loop {
        bits.refill();
        let last_block = bits.take(1) == 1;
        match bits.take(2) {
            0 => {
                let skip = bits.count & 7;
                bits.take(skip);
                bits.refill();
                let len = bits.take(16) as usize;
                ensure!(bits.take(16) as usize == !len & 0xffff, "a stored block's length");
                let at = bits.bit_position() / 8;
                ensure!(at + len <= input.len() && op + len <= out.len(), "a stored block");
                out[op..op + len].copy_from_slice(&input[at..at + len]);
                op += len;
                bits = Bits { input, pos: at + len, buf: 0, count: 0, past_end: 0 };
            }
            1 => op = decode(&mut bits, &fixed_code(), out, op)?,
            2 => {
                let (litlen, dist) = read_header(&mut bits)?;
                op = decode(&mut bits, &Code::new(&litlen, &dist)?, out, op)?;
            }
            _ => bail!("a reserved block type"),
        }
        ensure!(bits.past_end * 8 <= bits.count as usize, "a truncated stream");
        if last_block {
            ensure!(op == out.len(), "a stream shorter than its object");
            ensure!(bits.bit_position().div_ceil(8) == input.len(), "bytes after the stream");
            return Ok(());
        }
    }
}

/// The tables of deflate's fixed code (RFC 1951, 3.2.6).
fn fixed_code() -> Code {
    let mut litlen = [8u8; 288];
    litlen[144..256].fill(9);
    litlen[256..280].fill(7);
    Code::new(&litlen, &[5; 30]).expect("the fixed code")
}

/// Whether `input` starts with the `len` bits of `header`.
fn same_bits(input: &[u8], header: &[u8], len: usize) -> bool {
    let full = len / 8;
    if input.len() < header.len() || input[..full] != header[..full] {
        return false;
    }
    len.is_multiple_of(8) || input[full] & ((1u8 << (len % 8)) - 1) == header[full]
}

/// Reads a dynamic block's header after its type: the code lengths of the literal/length
/// and distance codes.
fn read_header(bits: &mut Bits) -> Result<(Vec<u8>, Vec<u8>)> {
    bits.refill();
    let hlit = bits.take(5) as usize + 257;
    let hdist = bits.take(5) as usize + 1;
    let hclen = bits.take(4) as usize + 4;
    let mut cl = [0u8; 19];
    for &i in &CODE_LENGTH_ORDER[..hclen] {
        bits.refill();
        cl[i] = bits.take(3) as u8;
    }
    let cl_table = build(&cl, 7, |s| entry(0, LITERAL, 0, s as u32))?;
    let mut lengths = vec![0u8; hlit + hdist];
    let mut i = 0;
    while i < lengths.len() {
        bits.refill();
        let e = bits.symbol(&cl_table, 7);
        ensure!((e >> 8) & 0xf == LITERAL, "a bad code-length code");
        let (value, repeat) = match e >> 16 {
            s @ 0..=15 => (s as u8, 1),
            16 => {
                ensure!(i > 0, "a repeat with nothing before it");
                (lengths[i - 1], 3 + bits.take(2) as usize)
            }
            17 => (0, 3 + bits.take(3) as usize),
            _ => (0, 11 + bits.take(7) as usize),
        };
        ensure!(i + repeat <= lengths.len(), "code lengths past their count");
        lengths[i..i + repeat].fill(value);
        i += repeat;
    }
    ensure!(lengths[256] > 0, "a code without an end of block");
    let dist = lengths.split_off(hlit);
    Ok((lengths, dist))
}

/// Copies a match of `len` bytes from `dist` back to `op`.
#[inline(always)]
fn copy_match(out: &mut [u8], op: usize, len: usize, dist: usize) {
    if dist >= 8 && op + len + 8 <= out.len() {
        // Eight bytes at a time: a chunk may read what the one before wrote, which is what
        // a match longer than its distance means; up to 7 bytes past the match are
        // written and overwritten later.
        let mut at = op;
        while at < op + len {
            let chunk: [u8; 8] = out[at - dist..at - dist + 8].try_into().expect("8 bytes");
            out[at..at + 8].copy_from_slice(&chunk);
            at += 8;
        }
    } else if dist >= len {
        out.copy_within(op - dist..op - dist + len, op);
    } else {
        for i in op..op + len {
            out[i] = out[i - dist];
        }
    }
}

/// Decodes a block's symbols with `code` into `out` from `op`; returns where it ended.
#[inline(always)]
fn decode(bits: &mut Bits, code: &Code, out: &mut [u8], mut op: usize) -> Result<usize> {
    let primary: &[u32; 1 << LITLEN_BITS] =
        code.litlen[..1 << LITLEN_BITS].try_into().expect("a primary table");
    loop {
        bits.refill();
        // Up to three first-level entries for one refill (56 bits: 11 at most each, and
        // 15 for a subtable's entry after them, with a length's 5 extra bits).
        let mut e = primary[(bits.buf & ((1 << LITLEN_BITS) - 1)) as usize];
        for _ in 0..2 {
            if e & (LITERAL << 8) == 0 {
                break;
            }
            bits.take(e & 0xff);
            op = put_literals(out, op, e)?;
            e = primary[(bits.buf & ((1 << LITLEN_BITS) - 1)) as usize];
        }
        if e & (SUBTABLE << 8) != 0 {
            bits.take(LITLEN_BITS);
            let sub = (e >> 16) + (bits.buf as u32 & ((1 << ((e >> 12) & 0xf)) - 1));
            e = code.litlen[sub as usize];
        }
        bits.take(e & 0xff);
        match (e >> 8) & 0xf {
            LITERAL => op = put_literals(out, op, e)?,
            MATCH => {
                bits.refill();
                let len = (e >> 16) as usize + bits.take((e >> 12) & 0xf) as usize;
                let d = bits.symbol(&code.dist, DIST_BITS);
                ensure!((d >> 8) & 0xf == MATCH, "a bad distance code");
                let dist = (d >> 16) as usize + bits.take((d >> 12) & 0xf) as usize;
                ensure!(dist <= op && op + len <= out.len(), "a bad match");
                copy_match(out, op, len, dist);
                op += len;
            }
            END => return Ok(op),
            _ => bail!("a bad literal/length code"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Bytes that deflate into every kind of token: literals, short and long matches, runs
    /// (a distance shorter than the length), far distances.
    fn varied(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed * 2 + 1;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 => out.extend((0..x % 40).map(|i| b'a' + ((x >> i) % 26) as u8)),
                1 if out.len() > 300 => {
                    let at = (x >> 8) as usize % (out.len() - 260);
                    let n = (x >> 40) as usize % 258;
                    out.extend_from_within(at..at + n);
                }
                2 => out.extend(std::iter::repeat_n((x >> 16) as u8, (x >> 24) as usize % 300)),
                _ => out.extend_from_slice(b"{\"speckle_type\":\"Objects.Geometry.Mesh\","),
            }
        }
        out.truncate(len);
        out
    }

    fn deflate(raw: &[u8], level: u32) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        e.write_all(raw).unwrap();
        e.finish().unwrap()
    }

    /// Inflates `stream` twice in a row (the second time with kept tables).
    fn twice(stream: &[u8], raw_len: usize) -> Option<Result<Vec<u8>>> {
        let _ = inflate_kept(stream, raw_len);
        inflate_kept(stream, raw_len)
    }

    #[test]
    fn kept_tables_decode_what_deflate_wrote() {
        for (seed, len) in [(1, 0), (2, 1), (3, 700), (4, 5_000), (5, 70_000), (6, 400_000)] {
            for level in [1, 6, 9] {
                let raw = varied(seed, len);
                let stream = deflate(&raw, level);
                match twice(&stream, raw.len()) {
                    Some(out) => {
                        assert_eq!(out.unwrap(), raw, "seed {seed} len {len} level {level}")
                    }
                    // Only a stream that does not start with a dynamic block is not taken.
                    None => assert!(len < 100 || (stream[0] >> 1) & 3 != 2, "len {len}"),
                }
            }
        }
    }

    #[test]
    fn a_member_is_taken_from_the_second_miss_and_kept() {
        let raw = speckle_gen::objects(3, 0, 2).concat();
        let stream = deflate(&raw, 6);
        KEPT_CODES.with(|k| *k.borrow_mut() = KeptCodes::default());
        assert!(inflate_kept(&stream, raw.len()).is_none(), "a first miss is the backend's");
        for _ in 0..3 {
            assert_eq!(inflate_kept(&stream, raw.len()).unwrap().unwrap(), raw);
        }
        // Other codes each miss once, and at most KEPT codes are kept.
        for i in 2..12 {
            let other = speckle_gen::objects(3, i * 2, 2).concat();
            let s = deflate(&other, 6);
            assert!(inflate_kept(&s, other.len()).is_none());
            assert_eq!(inflate_kept(&s, other.len()).unwrap().unwrap(), other);
        }
        assert_eq!(KEPT_CODES.with(|k| k.borrow().codes.len()), KEPT);
    }

    #[test]
    fn damage_and_wrong_lengths_are_errors_not_panics() {
        let raw = speckle_gen::objects(3, 0, 4).concat();
        let stream = deflate(&raw, 6);
        assert_eq!((stream[0] >> 1) & 3, 2, "a dynamic block");
        for len in [0, 1, raw.len() - 1, raw.len() + 1] {
            assert!(twice(&stream, len).unwrap().is_err(), "length {len}");
        }
        for cut in [stream.len() / 2, stream.len() - 1] {
            let _ = twice(&stream[..cut], raw.len());
        }
        let mut longer = stream.clone();
        longer.push(0);
        assert!(twice(&longer, raw.len()).unwrap().is_err());
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..3_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bad = stream.clone();
            let at = x as usize % bad.len();
            bad[at] ^= 1 << ((x >> 32) % 8);
            // Whatever it decodes to, nothing beyond the recorded length.
            if let Some(Ok(out)) = twice(&bad, raw.len()) {
                assert_eq!(out.len(), raw.len());
            }
        }
    }

    #[test]
    fn codes_follow_rfc_1951() {
        // The example of RFC 1951, 3.2.2: lengths (3, 3, 3, 3, 3, 2, 4, 4) give codes
        // 010, 011, 100, 101, 110, 00, 1110, 1111 (here bit-reversed).
        let codes = canonical_codes(&[3, 3, 3, 3, 3, 2, 4, 4]).unwrap();
        let msb_first: Vec<u32> = codes
            .iter()
            .zip([3, 3, 3, 3, 3, 2, 4, 4])
            .map(|(&c, l)| c.reverse_bits() >> (32 - l))
            .collect();
        assert_eq!(msb_first, [0b010, 0b011, 0b100, 0b101, 0b110, 0b00, 0b1110, 0b1111]);
        assert!(canonical_codes(&[1, 1, 1]).is_none(), "over-subscribed");
    }
}
