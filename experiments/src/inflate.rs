//! A deflate decoder (RFC 1951) that keeps its Huffman tables between streams: a dynamic
//! block whose header (its code lengths) is bit for bit the last one's reuses the tables
//! built for it, as libdeflate keeps the fixed code's tables between calls. What a stash
//! whose gzip members share one trained code (`trained_code.rs`) would read with.

use anyhow::{Result, bail, ensure};

/// Bits of a code looked up at once in the first level of each table.
const LITLEN_BITS: u32 = 11;
const DIST_BITS: u32 = 8;

// An entry of a table: bits 0-7 the bits it consumes, 8-11 its kind, 12-15 its extra bits
// (or a subtable's bits), 16-31 its value (the literal, the base length or distance, or
// where its subtable starts).
const LITERAL: u32 = 1;
const MATCH: u32 = 2;
const SUBTABLE: u32 = 4;
const END: u32 = 8;
const INVALID: u32 = 0;

const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] =
    [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// The order in which a dynamic header gives the code-length code's lengths.
pub const CODE_LENGTH_ORDER: [usize; 19] =
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
pub fn canonical_codes(lengths: &[u8]) -> Option<Vec<u32>> {
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
        (self.pos - self.past_end) * 8 - self.count as usize
    }
}

/// Tables built for one code.
struct Code {
    litlen: Vec<u32>,
    dist: Vec<u32>,
}

impl Code {
    fn new(litlen: &[u8], dist: &[u8]) -> Result<Self> {
        Ok(Self {
            litlen: build(litlen, LITLEN_BITS, litlen_payload)?,
            dist: build(dist, DIST_BITS, dist_payload)?,
        })
    }
}

/// A decoder that keeps the fixed code's tables and the last dynamic header's.
pub struct Inflater {
    fixed: Code,
    /// The last dynamic header seen at a byte boundary: its bytes (the last one masked to
    /// its bits), its length in bits, and its tables.
    last: Option<(Vec<u8>, usize, Code)>,
    /// Dynamic headers decoded and tables built, and headers whose tables were reused.
    pub built: u64,
    pub reused: u64,
}

impl Default for Inflater {
    fn default() -> Self {
        let mut litlen = [8u8; 288];
        litlen[144..256].fill(9);
        litlen[256..280].fill(7);
        Self {
            fixed: Code::new(&litlen, &[5; 30]).expect("the fixed code"),
            last: None,
            built: 0,
            reused: 0,
        }
    }
}

impl Inflater {
    /// Inflates the raw deflate stream `input` into `out`, which must be exactly the
    /// stream's length.
    pub fn inflate(&mut self, input: &[u8], out: &mut [u8]) -> Result<()> {
        let mut bits = Bits { input, pos: 0, buf: 0, count: 0, past_end: 0 };
        let mut op = 0;
        loop {
            bits.refill();
            let start = bits.bit_position();
            let last_block = bits.take(1) == 1;
            match bits.take(2) {
                0 => {
                    let skip = bits.count & 7;
                    bits.take(skip);
                    bits.refill();
                    let len = bits.take(16) as usize;
                    ensure!(bits.take(16) as usize == !len & 0xffff, "a stored block's length");
                    // Whole bytes left in the bit buffer go back to the input.
                    let at = bits.bit_position() / 8;
                    ensure!(at + len <= input.len() && op + len <= out.len(), "a stored block");
                    out[op..op + len].copy_from_slice(&input[at..at + len]);
                    op += len;
                    bits = Bits { input, pos: at + len, buf: 0, count: 0, past_end: 0 };
                }
                1 => op = decode(&mut bits, &self.fixed, out, op)?,
                2 => {
                    let code = self.dynamic(&mut bits, start)?;
                    op = decode(&mut bits, code, out, op)?;
                }
                _ => bail!("a reserved block type"),
            }
            ensure!(bits.past_end * 8 <= bits.count as usize, "a truncated stream");
            if last_block {
                ensure!(op == out.len(), "a stream shorter than its object");
                return Ok(());
            }
        }
    }

    /// The tables of the dynamic block whose first bit is at `start`: the last ones if its
    /// header is the same bits, else built from its header.
    fn dynamic(&mut self, bits: &mut Bits, start: usize) -> Result<&Code> {
        if start % 8 == 0
            && let Some((header, len, _)) = &self.last
            && same_bits(&bits.input[start / 8..], header, *len)
        {
            // Start again after the header, whose bits are known.
            let end = start + len;
            *bits = Bits { input: bits.input, pos: end / 8, buf: 0, count: 0, past_end: 0 };
            bits.refill();
            bits.take((end % 8) as u32);
            self.reused += 1;
            return Ok(&self.last.as_ref().expect("just matched").2);
        }
        let (litlen, dist) = read_header(bits)?;
        let code = Code::new(&litlen, &dist)?;
        self.built += 1;
        let len = bits.bit_position() - start;
        if start % 8 == 0 {
            let mut header = bits.input[start / 8..(start + len).div_ceil(8)].to_vec();
            if len % 8 != 0 {
                *header.last_mut().expect("a header") &= (1u8 << (len % 8)) - 1;
            }
            self.last = Some((header, len, code));
            return Ok(&self.last.as_ref().expect("just set").2);
        }
        // A block not at a byte boundary: its tables are not kept.
        self.last = Some((Vec::new(), usize::MAX, code));
        Ok(&self.last.as_ref().expect("just set").2)
    }
}

/// Whether `input` starts with the `len` bits of `header`.
fn same_bits(input: &[u8], header: &[u8], len: usize) -> bool {
    let full = len / 8;
    if len == usize::MAX || input.len() < header.len() || input[..full] != header[..full] {
        return false;
    }
    len % 8 == 0 || input[full] & ((1u8 << (len % 8)) - 1) == header[full]
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
        // Up to three literals for one refill (56 bits, 15 at most each).
        let mut e = primary[(bits.buf & ((1 << LITLEN_BITS) - 1)) as usize];
        for _ in 0..2 {
            if e & (LITERAL << 8) == 0 {
                break;
            }
            bits.take(e & 0xff);
            let Some(slot) = out.get_mut(op) else { bail!("a stream longer than its object") };
            *slot = (e >> 16) as u8;
            op += 1;
            e = primary[(bits.buf & ((1 << LITLEN_BITS) - 1)) as usize];
        }
        if e & (SUBTABLE << 8) != 0 {
            bits.take(LITLEN_BITS);
            let sub = (e >> 16) + (bits.buf as u32 & ((1 << ((e >> 12) & 0xf)) - 1));
            e = code.litlen[sub as usize];
        }
        bits.take(e & 0xff);
        match (e >> 8) & 0xf {
            LITERAL => {
                let Some(slot) = out.get_mut(op) else { bail!("a stream longer than its object") };
                *slot = (e >> 16) as u8;
                op += 1;
            }
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
