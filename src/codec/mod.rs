//! Codecs: how a stored value is made from an object and read back. The [`Codec`] a stash
//! records and every choice that depends on it live here; the handle asks the codec and
//! never branches on it.
//!
//! Rows say how they were written: a gzip member starts with `1f 8b`, a zstd frame with
//! `28 b5 2f fd` and names its dictionary. So rows of both codecs coexist in a stash, and
//! either setting reads every row; [`decode_checked`] is the one gate every stored byte
//! passes (decoded, then hashed against its key) before anyone trusts it.
//!
//! - `gzip.rs`: standard gzip members, one deflate state per thread;
//! - `gzip_code.rs`: one deflate code trained on a stash's first small objects, and
//!   `inflate.rs`, the decoder that keeps the tables of the codes it meets;
//! - `zstd_dict.rs`: zstd with dictionaries trained on the stash's own objects;
//! - `scratch.rs`: outputs of exactly their length, through a buffer per thread.

mod gzip;
pub(crate) mod gzip_code;
pub(crate) mod inflate;
pub(crate) mod scratch;
pub(crate) mod zstd_dict;

pub(crate) use gzip::{DEFAULT_LEVEL, MAX_LEVEL, compress, decompress, key_of_intact_gzip};

use gzip::decompress_with;
use gzip_code::GzipCode;
use zstd_dict::{DecodeError, Dictionaries, Dictionary};

use crate::error::{Error, Result};
use crate::key::Key;
use crate::settings::parse::words;

/// How the objects of a stash are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    /// Each object a standard gzip member (any gzip tool reads it). The default. At the
    /// default level, small objects after the first 2,000 share one deflate code trained
    /// on those, so that reads build its decoding tables once.
    #[default]
    Gzip,
    /// Zstandard with a dictionary trained on a sample of the stash's own objects: much
    /// smaller rows for small objects, and faster. The first objects saved (until the
    /// sample is full, see [`StashBuilder::dictionary_sample`](crate::StashBuilder)) are
    /// gzipped while the sample is gathered; the dictionary is then trained once and kept
    /// in the database, and later opens use it without retraining.
    ZstdDict,
}

words!(Codec, "codec", "gzip or zstd-dict (also zstd)", {
    Gzip => "gzip",
    ZstdDict => "zstd-dict" | "zstd",
});

impl Codec {
    /// Whether new objects wait for a dictionary trained on the stash's first objects.
    pub(crate) fn trains_dictionary(self) -> bool {
        self == Codec::ZstdDict
    }

    /// Whether, at `level`, small objects share one deflate code trained on the stash's
    /// first objects (`gzip_code.rs`): gzip at the default level only, where the trained
    /// code was measured.
    pub(crate) fn trains_gzip_code(self, level: u32) -> bool {
        self == Codec::Gzip && level == DEFAULT_LEVEL
    }

    /// Whether a gzip member fetched from elsewhere (a remote pack) can be stored as it is:
    /// it is then a row this codec would write.
    #[cfg(feature = "remote")]
    pub(crate) fn stores_gzip_members(self) -> bool {
        self == Codec::Gzip
    }
}

/// Decodes a stored value of either codec, which must hold exactly `raw_len` bytes: a
/// gzip member, or a zstd frame of one of `dicts`.
fn decode(stored: &[u8], raw_len: u64, dicts: &Dictionaries) -> Result<Vec<u8>, DecodeError> {
    if stored.starts_with(&zstd_dict::MAGIC) {
        dicts.decompress(stored, raw_len)
    } else {
        Ok(decompress(stored, raw_len)?)
    }
}

/// Decodes a stored row and checks that its bytes hash to `key`: the one gate every byte
/// passes before a caller, `verify` or salvage trusts it. Only wrong bytes are
/// [`Error::Corrupt`]; a dictionary the database could not be asked for is the error of
/// that lookup.
pub(crate) fn decode_checked(
    key: &Key,
    raw_len: i64,
    stored: &[u8],
    dicts: &Dictionaries,
) -> Result<Vec<u8>> {
    let raw_len = u64::try_from(raw_len)
        .map_err(|_| Error::corrupt(*key, format!("its recorded length {raw_len} is negative")))?;
    let raw = decode(stored, raw_len, dicts).map_err(|e| match e {
        DecodeError::Damaged(reason) => Error::corrupt(*key, reason),
        DecodeError::Lookup(e) => e,
    })?;
    let actual = Key::of(&raw);
    if actual != *key {
        // Wrong bytes from a member this crate's own decoder inflated (`inflate.rs`) would
        // be its defect, not the row's: the backend decides before the row is called
        // damaged.
        if let Ok(again) = decompress_with(stored, raw_len, false)
            && Key::of(&again) == *key
        {
            log::error!("objstash: the kept-tables decoder misread {key}; read by the backend");
            return Ok(again);
        }
        return Err(Error::corrupt(*key, format!("its bytes hash to {actual}")));
    }
    Ok(raw)
}

/// Compresses `raw` with `dict` if there is one, else gzips it in the stash's trained
/// `code` if there is one and it can send `raw`, else at `level`.
pub(crate) fn encode(
    raw: &[u8],
    level: u32,
    dict: Option<&Dictionary>,
    code: Option<&GzipCode>,
) -> Vec<u8> {
    match (dict, code) {
        (Some(dict), _) => dict.compress(raw),
        (None, Some(code)) => code.encode(raw).unwrap_or_else(|| compress(raw, level)),
        (None, None) => compress(raw, level),
    }
}
