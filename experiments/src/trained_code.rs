//! One deflate code for every object of a stash: trained on a sample of its objects, sent
//! in a dynamic block's header as any deflate code is (so that every member is still a gzip
//! member any tool reads), the same header bits in every member, so that a decoder that
//! keeps its tables (`inflate.rs`) builds them once. An object that needs a symbol the code
//! leaves out is not encoded with it.

use crate::inflate::{CODE_LENGTH_ORDER, canonical_codes};

/// A hash chain's probes for each position: about libdeflate's level 1 parse.
const PROBES: usize = 4;
const HASH_BITS: u32 = 14;
const WINDOW: usize = 32 * 1024;

/// An LZ77 token: a literal, or a match of a length (3-258) at a distance.
#[derive(Clone, Copy)]
pub enum Token {
    Literal(u8),
    Match(u16, u16),
}

/// The greedy LZ77 parse of `data` with hash chains of `PROBES` probes.
pub fn parse(data: &[u8]) -> Vec<Token> {
    let hash = |i: usize| {
        let v = u32::from(data[i]) | u32::from(data[i + 1]) << 8 | u32::from(data[i + 2]) << 16;
        (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
    };
    let mut head = vec![usize::MAX; 1 << HASH_BITS];
    let mut prev = vec![usize::MAX; data.len()];
    let mut tokens = Vec::with_capacity(data.len() / 2);
    let insert = |i: usize, head: &mut Vec<usize>, prev: &mut Vec<usize>| {
        if i + 3 <= data.len() {
            let h = hash(i);
            prev[i] = head[h];
            head[h] = i;
        }
    };
    let mut i = 0;
    while i < data.len() {
        let mut best = (0, 0);
        if i + 3 <= data.len() {
            let mut cand = head[hash(i)];
            for _ in 0..PROBES {
                if cand == usize::MAX || i - cand > WINDOW {
                    break;
                }
                let max = (data.len() - i).min(258);
                let len =
                    data[cand..].iter().zip(&data[i..i + max]).take_while(|(a, b)| a == b).count();
                if len > best.0 {
                    best = (len, i - cand);
                }
                cand = prev[cand];
            }
        }
        if best.0 >= 3 {
            tokens.push(Token::Match(best.0 as u16, best.1 as u16));
            for j in i..i + best.0 {
                insert(j, &mut head, &mut prev);
            }
            i += best.0;
        } else {
            tokens.push(Token::Literal(data[i]));
            insert(i, &mut head, &mut prev);
            i += 1;
        }
    }
    tokens
}

/// A length's symbol (257-285) and its extra bits' value and count.
fn length_symbol(len: u16) -> (usize, u32, u32) {
    const BASE: [u16; 29] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
        131, 163, 195, 227, 258,
    ];
    const EXTRA: [u32; 29] =
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
    let i = BASE.partition_point(|&b| b <= len) - 1;
    (257 + i, u32::from(len - BASE[i]), EXTRA[i])
}

/// A distance's symbol (0-29) and its extra bits' value and count.
fn dist_symbol(dist: u16) -> (usize, u32, u32) {
    let d = u32::from(dist) - 1;
    if d < 4 {
        return (d as usize, 0, 0);
    }
    let extra = d.ilog2() - 1;
    let symbol = 2 * extra + 2 + ((d >> extra) & 1);
    let base = (2 + ((d >> extra) & 1)) << extra;
    (symbol as usize, d - base, extra)
}

/// Huffman code lengths of `freqs` of at most `limit` bits; symbols of frequency 0 get no
/// code. Frequencies are halved until the longest code fits.
pub fn lengths(freqs: &[u64], limit: u8) -> Vec<u8> {
    let mut freqs = freqs.to_vec();
    loop {
        let lens = huffman(&freqs);
        if lens.iter().all(|&l| l <= limit) {
            return lens;
        }
        for f in &mut freqs {
            if *f > 0 {
                *f = (*f / 2).max(1);
            }
        }
    }
}

fn huffman(freqs: &[u64]) -> Vec<u8> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut parent: Vec<usize> = Vec::new();
    let mut heap = BinaryHeap::new();
    let mut leaf = vec![usize::MAX; freqs.len()];
    for (s, &f) in freqs.iter().enumerate() {
        if f > 0 {
            leaf[s] = parent.len();
            parent.push(usize::MAX);
            heap.push(Reverse((f, leaf[s])));
        }
    }
    if heap.len() == 1 {
        return freqs.iter().map(|&f| u8::from(f > 0)).collect();
    }
    while heap.len() > 1 {
        let Reverse((fa, a)) = heap.pop().expect("two");
        let Reverse((fb, b)) = heap.pop().expect("two");
        let node = parent.len();
        parent.push(usize::MAX);
        parent[a] = node;
        parent[b] = node;
        heap.push(Reverse((fa + fb, node)));
    }
    leaf.iter()
        .map(|&n| {
            if n == usize::MAX {
                return 0;
            }
            let (mut depth, mut at) = (0, n);
            while parent[at] != usize::MAX {
                at = parent[at];
                depth += 1;
            }
            depth
        })
        .collect()
}

/// Writes bits least significant first.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    buf: u64,
    count: u32,
}

impl BitWriter {
    fn put(&mut self, value: u32, bits: u32) {
        self.buf |= u64::from(value) << self.count;
        self.count += bits;
        while self.count >= 8 {
            self.out.push(self.buf as u8);
            self.buf >>= 8;
            self.count -= 8;
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.count > 0 {
            self.out.push(self.buf as u8);
        }
        self.out
    }
}

/// A trained code: its lengths and codes, and its block header's bits (with a final,
/// dynamic block's first three bits).
pub struct TrainedCode {
    litlen: Vec<u8>,
    dist: Vec<u8>,
    litlen_codes: Vec<u32>,
    dist_codes: Vec<u32>,
    header: (Vec<(u32, u32)>, usize),
}

impl TrainedCode {
    /// The code of the tokens of `sample`: every length and distance symbol gets a code
    /// (so that any match can be sent), literals only those seen `min_literal` times or
    /// more (the header gives a run of zeros for the rest in a few bits).
    pub fn train(sample: &[Vec<u8>], min_literal: u64) -> Self {
        let mut lit = vec![0u64; 286];
        let mut dist = vec![1u64; 30];
        for o in sample {
            for t in parse(o) {
                match t {
                    Token::Literal(b) => lit[b as usize] += 1,
                    Token::Match(l, d) => {
                        lit[length_symbol(l).0] += 1;
                        dist[dist_symbol(d).0] += 1;
                    }
                }
            }
            lit[256] += 1;
        }
        for (s, f) in lit.iter_mut().enumerate() {
            if s < 256 && *f < min_literal {
                *f = 0;
            } else if s >= 256 {
                *f = (*f).max(1);
            }
        }
        let litlen = lengths(&lit, 15);
        let dist = lengths(&dist, 15);
        let header = header(&litlen, &dist);
        Self {
            litlen_codes: canonical_codes(&litlen).expect("a Huffman code"),
            dist_codes: canonical_codes(&dist).expect("a Huffman code"),
            litlen,
            dist,
            header,
        }
    }

    /// The header's size in bytes.
    pub fn header_bytes(&self) -> usize {
        self.header.1.div_ceil(8)
    }

    /// `data` as a gzip member with this code, or `None` if it has a byte the code
    /// leaves out.
    pub fn encode(&self, data: &[u8]) -> Option<Vec<u8>> {
        let tokens = parse(data);
        let mut w =
            BitWriter { out: Vec::with_capacity(data.len() / 2 + 100), ..Default::default() };
        w.out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
        for &(v, n) in &self.header.0 {
            w.put(v, n);
        }
        for t in tokens {
            match t {
                Token::Literal(b) => {
                    let l = self.litlen[b as usize];
                    if l == 0 {
                        return None;
                    }
                    w.put(self.litlen_codes[b as usize], l.into());
                }
                Token::Match(len, dist) => {
                    let (s, v, n) = length_symbol(len);
                    w.put(self.litlen_codes[s], self.litlen[s].into());
                    w.put(v, n);
                    let (s, v, n) = dist_symbol(dist);
                    w.put(self.dist_codes[s], self.dist[s].into());
                    w.put(v, n);
                }
            }
        }
        w.put(self.litlen_codes[256], self.litlen[256].into());
        let mut out = w.finish();
        let mut crc = flate2::Crc::new();
        crc.update(data);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        Some(out)
    }
}

/// The header of a final dynamic block with the code of `litlen` and `dist`: the values
/// and bit counts to write, and their total bits.
fn header(litlen: &[u8], dist: &[u8]) -> (Vec<(u32, u32)>, usize) {
    let hlit = litlen.iter().rposition(|&l| l > 0).expect("an end of block") + 1;
    let hdist = (dist.iter().rposition(|&l| l > 0).unwrap_or(0) + 1).max(1);
    let all: Vec<u8> = litlen[..hlit].iter().chain(&dist[..hdist]).copied().collect();
    // Run-length code the lengths: (symbol, extra value, extra bits).
    let mut runs = Vec::new();
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
            runs.push((v as usize, 0, 0));
            left -= 1;
            while left >= 3 {
                let n = left.min(6);
                runs.push((16, n as u32 - 3, 2));
                left -= n;
            }
        }
        for _ in 0..left {
            runs.push((v as usize, 0, 0));
        }
        i += run;
    }
    let mut freqs = [0u64; 19];
    for &(s, _, _) in &runs {
        freqs[s] += 1;
    }
    let cl = lengths(&freqs, 7);
    let cl_codes = canonical_codes(&cl).expect("a Huffman code");
    let hclen = (CODE_LENGTH_ORDER.iter().rposition(|&s| cl[s] > 0).expect("a code") + 1).max(4);
    let mut out = vec![(1, 1), (2, 2), (hlit as u32 - 257, 5), (hdist as u32 - 1, 5)];
    out.push((hclen as u32 - 4, 4));
    for &s in &CODE_LENGTH_ORDER[..hclen] {
        out.push((cl[s].into(), 3));
    }
    for (s, v, n) in runs {
        out.push((cl_codes[s], cl[s].into()));
        if n > 0 {
            out.push((v, n));
        }
    }
    let bits = out.iter().map(|&(_, n)| n as usize).sum();
    (out, bits)
}
