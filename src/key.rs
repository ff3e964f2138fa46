//! The key of an object: the 32-byte blake3 hash of its bytes.
//!
//! Keys print and parse as 64 lowercase hex digits; the first byte picks the bucket table
//! in the bucketed layout, so keys spread evenly over the 256 tables.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// The blake3 hash of an object's bytes: the address under which it is stored.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key([u8; 32]);

/// A key hashes as its four 8-byte words folded into one: a blake3 hash's bytes are
/// uniform already, and the maps a read passes through (the pending rows, the uses held in
/// memory) then hash 8 bytes rather than 32 and a length. Every byte counts, so keys made
/// by [`Key::from_bytes`] that differ anywhere spread too; the hasher's own seed keeps the
/// buckets unpredictable.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let word =
            |i: usize| u64::from_le_bytes(self.0[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        state.write_u64(word(0) ^ word(1) ^ word(2) ^ word(3));
    }
}

impl Key {
    /// The key of `object`: its blake3 hash.
    #[must_use]
    pub fn of(object: &[u8]) -> Self {
        Key(*blake3::hash(object).as_bytes())
    }

    /// Wraps 32 hash bytes as a key, without checking that any object has them as hash.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Key(bytes)
    }

    /// The 32 bytes of the hash.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Reads a key stored as a 32-byte blob; `None` when the blob has another length.
    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Key)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        f.write_str(std::str::from_utf8(&out).expect("hex digits are ASCII"))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// The text given to [`Key::from_str`] is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a key: a key is 64 hex digits (a blake3 hash)")]
pub struct ParseKeyError {
    input: String,
}

impl FromStr for Key {
    type Err = ParseKeyError;

    /// Parses 64 hex digits, upper or lower case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseKeyError { input: s.chars().take(80).collect() };
        let digits = s.as_bytes();
        if digits.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or_else(err)?;
            let lo = hex_value(pair[1]).ok_or_else(err)?;
            out[i] = hi << 4 | lo;
        }
        Ok(Key(out))
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hash_and_hex_round_trip() {
        let key = Key::of(b"");
        let hex = key.to_string();
        assert_eq!(hex, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
        assert_eq!(hex.parse::<Key>().unwrap(), key);
        assert_eq!(hex.to_uppercase().parse::<Key>().unwrap(), key);
        assert_eq!(key.as_bytes(), blake3::hash(b"").as_bytes());
    }

    #[test]
    fn rejects_bad_text() {
        let good = Key::of(b"x").to_string();
        for bad in ["", "ab", &good[1..], &format!("{good}0"), &good.replace('a', "g")] {
            assert!(bad.parse::<Key>().is_err(), "{bad:?} parsed");
        }
        let err = "zz".parse::<Key>().unwrap_err().to_string();
        assert!(err.contains("64 hex digits"), "{err}");
    }

    #[test]
    fn from_slice_checks_length() {
        assert!(Key::from_slice(&[0; 31]).is_none());
        assert_eq!(Key::from_slice(&[7; 32]), Some(Key::from_bytes([7; 32])));
    }
}
