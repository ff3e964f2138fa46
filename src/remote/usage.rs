//! Use reports: which remote objects a machine used, and when, so that a trim
//! (`trim.rs`) keeps what any machine still uses.
//!
//! A push (the objects it found on the remote already: those it uploaded are dated by
//! their pack's `added` event), a pull and a read-through (the objects and chunks
//! fetched) note the keys they used; the notes go
//! up in batches as one file, `uses/<ms>-<random>.uses`, at the end of a push or a pull,
//! once 100,000 keys wait, and when a note or a close finds the oldest waiting for more
//! than 10 minutes: never a request per read, nor per process. A handle that closes with
//! a batch not yet due parks it beside the stash (`-remote-uses`, in the report's format,
//! merged under a lock); the next handle that closes or notes takes the parked uses with
//! its own, so a machine's short-lived processes (a command line's reads) send one report
//! per ten minutes between them.
//!
//! ```text
//! "OSTUSES1" | count u32 | count x (key [32] | ms u64)       (integers little-endian)
//! ```
//!
//! A trim merges the reports it read into one and deletes them.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::client::Part;
use super::pack_log::now_ms;
use crate::key::Key;

const MAGIC: &[u8; 8] = b"OSTUSES1";
const ENTRY: usize = 32 + 8;
/// Keys waiting that make a report go up at the next note.
const BATCH: usize = 100_000;
/// How long a note may wait before a later note sends the batch.
const WAIT: Duration = Duration::from_secs(600);
/// Suffix of the file of parked uses beside the stash.
pub(crate) const PARKED: &str = crate::files::REMOTE_USES;

/// Keys used and not yet reported.
#[derive(Default)]
pub(crate) struct Usage {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    keys: HashMap<Key, u64>,
    since: Option<Instant>,
}

impl Usage {
    /// Notes `keys` as used now; whether a report is due.
    pub(crate) fn note(&self, keys: impl IntoIterator<Item = Key>) -> bool {
        let now = now_ms();
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            waiting.keys.insert(key, now);
        }
        if waiting.keys.is_empty() {
            return false;
        }
        let since = *waiting.since.get_or_insert_with(Instant::now);
        waiting.keys.len() >= BATCH || since.elapsed() >= WAIT
    }

    /// Takes what waits, to be sent; `None` if nothing does.
    pub(crate) fn take(&self) -> Option<Vec<(Key, u64)>> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.since = None;
        let keys = std::mem::take(&mut waiting.keys);
        (!keys.is_empty()).then(|| keys.into_iter().collect())
    }

    /// Puts back what could not be sent (a later report carries it).
    pub(crate) fn put_back(&self, uses: Vec<(Key, u64)>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, ms) in uses {
            let at = waiting.keys.entry(key).or_insert(ms);
            *at = (*at).max(ms);
        }
        waiting.since.get_or_insert_with(Instant::now);
    }
}

/// A report's file name: when it was written, and a random part (two machines' reports of
/// one millisecond are two files).
pub(crate) fn name(ms: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(ms);
    format!("{ms:013}-{:016x}.uses", h.finish())
}

/// Whether `name` is a report's file name.
pub(crate) fn is_name(name: &str) -> bool {
    name.ends_with(".uses") && name.len() == 13 + 1 + 16 + 5
}

pub(crate) fn encode(uses: &[(Key, u64)]) -> Bytes {
    let mut out = Vec::with_capacity(12 + uses.len() * ENTRY);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(uses.len() as u32).to_le_bytes());
    for (key, ms) in uses {
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&ms.to_le_bytes());
    }
    Bytes::from(out)
}

/// The uses a report records, or why it cannot be read.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<(Key, u64)>, String> {
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err("not a use report".into());
    }
    let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    if bytes.len() != 12 + count * ENTRY {
        return Err(format!("{} bytes for {count} uses", bytes.len()));
    }
    Ok(bytes[12..]
        .chunks_exact(ENTRY)
        .map(|e| {
            let key = Key::from_slice(&e[..32]).expect("32 bytes");
            (key, u64::from_le_bytes(e[32..].try_into().expect("8 bytes")))
        })
        .collect())
}

impl super::Remote {
    /// Notes `keys` as used; sends the report if one is due (a failure is logged, and the
    /// notes wait for the next report).
    pub(crate) fn note_used(&self, keys: impl IntoIterator<Item = Key>) {
        if self.usage.note(keys)
            && let Err(e) = self.send_uses()
        {
            log::warn!("{e}");
        }
    }

    /// Sends the uses noted and not yet reported, in one request.
    pub(crate) fn send_uses(&self) -> Result<()> {
        let mut uses = self.usage.take().unwrap_or_default();
        // What closed handles parked goes up with it.
        uses.extend(park::take(&self.parked).unwrap_or_else(|e| {
            log::warn!("objstash: reading the parked uses of the remote: {e}");
            Vec::new()
        }));
        if uses.is_empty() {
            return Ok(());
        }
        let name = name(now_ms());
        let sent = self.runtime.block_on(self.client.put(Part::Uses, &name, encode(&uses), false));
        if sent.is_err() {
            self.usage.put_back(uses);
        }
        sent
    }

    /// As the handle closes: sends the uses not yet reported with those parked beside the
    /// stash if they are due (the oldest waited 10 minutes, or a batch's worth), else parks
    /// them there; parks them too if the remote failed in the last minute (a close does not
    /// wait for a remote that is down).
    pub(crate) fn send_uses_at_close(&self) -> Result<()> {
        let failing = self
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < Duration::from_secs(60));
        let Some(mut uses) = self.usage.take() else { return Ok(()) };
        let parked = park::take(&self.parked).unwrap_or_else(|e| {
            log::warn!("objstash: reading the parked uses of the remote: {e}");
            Vec::new()
        });
        uses.extend(parked);
        let oldest = uses.iter().map(|(_, ms)| *ms).min().unwrap_or(u64::MAX);
        let due = uses.len() >= BATCH || now_ms().saturating_sub(oldest) >= WAIT.as_millis() as u64;
        if due && !failing {
            let sent = self.runtime.block_on(self.client.put(
                Part::Uses,
                &name(now_ms()),
                encode(&uses),
                false,
            ));
            if sent.is_ok() {
                return Ok(());
            }
            park::put(&self.parked, &uses)
                .map_err(|e| crate::error::Error::io("parking the remote's uses", e))?;
            return sent;
        }
        park::put(&self.parked, &uses)
            .map_err(|e| crate::error::Error::io("parking the remote's uses", e))
    }
}

/// The file of parked uses: the report's format, merged and taken under an exclusive lock
/// of the file itself, so that handles closing at once lose none.
mod park {
    use std::fs::OpenOptions;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::path::Path;

    use super::{decode, encode};
    use crate::key::Key;

    /// Merges `uses` into the file (the later use of a key wins).
    pub(super) fn put(path: &Path, uses: &[(Key, u64)]) -> std::io::Result<()> {
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        file.lock()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut merged: std::collections::HashMap<Key, u64> = if bytes.is_empty() {
            Default::default()
        } else {
            decode(&bytes).unwrap_or_default().into_iter().collect()
        };
        for (key, ms) in uses {
            let at = merged.entry(*key).or_insert(*ms);
            *at = (*at).max(*ms);
        }
        let merged: Vec<(Key, u64)> = merged.into_iter().collect();
        file.seek(SeekFrom::Start(0))?;
        file.set_len(0)?;
        file.write_all(&encode(&merged))?;
        file.unlock()
    }

    /// Takes what the file holds, leaving it empty (none if there is no file).
    pub(super) fn take(path: &Path) -> std::io::Result<Vec<(Key, u64)>> {
        let mut file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        file.lock()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        file.set_len(0)?;
        file.unlock()?;
        // A damaged file's uses are lost: they only order a trim.
        Ok(if bytes.is_empty() { Vec::new() } else { decode(&bytes).unwrap_or_default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_read_back_and_damaged_ones_say_so() {
        let uses = vec![(Key::of(b"a"), 1), (Key::of(b"b"), 1_764_000_000_000)];
        assert_eq!(decode(&encode(&uses)).unwrap(), uses);
        let bytes = encode(&uses);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(b"OSTPACK1xxxx").is_err());
        let n = name(1_764_000_000_000);
        assert!(is_name(&n), "{n}");
        assert!(!is_name("1764000000000-x.pack"));
    }

    #[test]
    fn notes_wait_for_a_batch_and_go_back_if_unsent() {
        let usage = Usage::default();
        assert!(!usage.note([Key::of(b"a")]));
        let taken = usage.take().unwrap();
        assert_eq!(taken.len(), 1);
        assert!(usage.take().is_none());
        usage.put_back(taken);
        assert_eq!(usage.take().unwrap().len(), 1);
        assert!(usage.note((0..BATCH as u32).map(|i| Key::of(&i.to_le_bytes()))));
    }
}
