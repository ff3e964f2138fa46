//! Names on the remote: an application's ids (Speckle's object ids) travel with the
//! objects, so that a machine that never saved an object reads it through by its name.
//!
//! A name is a member of a pack of kind `Name` under a key derived from the name alone
//! (blake3 of a prefix and the name), so any machine finds it in its copy of the indexes
//! without knowing the object; the member inflates to a record of the name and the
//! object's key with a check of both:
//!
//! ```text
//! "OSTNAME1" | name length u16 | name | key [32] | blake3 of all before [..8]
//! ```
//!
//! A record that does not check (damage), or whose name is not the one asked for, is
//! refused. The object it names is read through and checked against its key as any other.
//! Names go up in packs of their own, after the objects they name. A name on the remote
//! keeps the object it was first pushed with (Speckle's ids are content ids, bound once).

use super::catalog::Location;
use super::pack::Kind;
use crate::codec;
use crate::error::Result;
use crate::key::Key;

const MAGIC: &[u8; 8] = b"OSTNAME1";
const CHECK: usize = 8;

/// The key under which the remote holds `name`.
pub(crate) fn key_of(name: &[u8]) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"objstash remote name\0");
    hasher.update(name);
    Key::from_bytes(*hasher.finalize().as_bytes())
}

/// The record of `name` naming `key`.
pub(crate) fn record(name: &[u8], key: &Key) -> Vec<u8> {
    let len = u16::try_from(name.len()).expect("names are at most 1,024 bytes");
    let mut out = Vec::with_capacity(8 + 2 + name.len() + 32 + CHECK);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(key.as_bytes());
    let check = blake3::hash(&out);
    out.extend_from_slice(&check.as_bytes()[..CHECK]);
    out
}

/// The key a record names, if it is whole and names `name`.
pub(crate) fn parse(record: &[u8], name: &[u8]) -> Result<Key, String> {
    let (named, key) = parse_any(record)?;
    if named != name {
        return Err("a name record of another name".into());
    }
    Ok(key)
}

/// The name and key of a record, if it is whole.
pub(crate) fn parse_any(record: &[u8]) -> Result<(&[u8], Key), String> {
    let body = record.len().checked_sub(CHECK).ok_or("a name record too short")?;
    if blake3::hash(&record[..body]).as_bytes()[..CHECK] != record[body..] {
        return Err("a name record that fails its check".into());
    }
    if body < 10 || &record[..8] != MAGIC {
        return Err("not a name record".into());
    }
    let len = u16::from_le_bytes([record[8], record[9]]) as usize;
    if body != 10 + len + 32 {
        return Err(format!("a name record of {} bytes for a {len}-byte name", record.len()));
    }
    Ok((&record[10..10 + len], Key::from_slice(&record[10 + len..body]).expect("32 bytes")))
}

impl super::Remote {
    /// The keys the remote's names say `names` map to; `None` for a name the remote does
    /// not hold (or whose pack went). A damaged record is refused and its pack quarantined.
    pub(crate) fn resolve(&self, names: &[&[u8]]) -> Result<Vec<Option<Key>>> {
        let keys: Vec<Key> = names.iter().map(|n| key_of(n)).collect();
        let located = self.locate(&keys)?;
        let (at, wanted): (Vec<usize>, Vec<Location>) = located
            .into_iter()
            .enumerate()
            .filter_map(|(i, l)| l.filter(|l| l.entry.kind == Kind::Name).map(|l| (i, l)))
            .unzip();
        let mut found = vec![None; names.len()];
        let mut damaged = std::collections::BTreeSet::new();
        for ((i, location), member) in at.into_iter().zip(&wanted).zip(self.fetch(&wanted)) {
            let member = match member {
                Ok(member) => member,
                Err(e) if Self::is_gone(&e) => continue,
                Err(e) => return Err(e),
            };
            let parsed = codec::decompress(&member, location.entry.raw_len)
                .and_then(|record| parse(&record, names[i]));
            match parsed {
                Ok(key) => found[i] = Some(key),
                Err(reason) => {
                    log::error!("name record in remote pack {}: {reason}", location.pack);
                    damaged.insert(location.pack.clone());
                }
            }
        }
        for pack in damaged {
            self.quarantine(&pack)?;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_its_key_and_refuses_damage_or_another_name() {
        let key = Key::of(b"object");
        let rec = record(b"speckle-id", &key);
        assert_eq!(parse(&rec, b"speckle-id"), Ok(key));
        assert!(parse(&rec, b"other-id").is_err());
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 1;
            assert!(parse(&bad, b"speckle-id").is_err(), "flip at {i}");
        }
        assert!(parse(&rec[..5], b"speckle-id").is_err());
        assert_ne!(key_of(b"a"), key_of(b"b"));
        assert_ne!(key_of(b"a"), Key::of(b"a"));
    }
}
