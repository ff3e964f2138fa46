//! The collectors' lease: one file, `control/lease`, that says which machine collects the
//! remote's garbage and until when, written only by conditional writes, so that two
//! machines never both believe they hold it.
//!
//! Taking it: write the file if there is none (`If-None-Match: *`), or replace it if the
//! holder's time ran out more than the clock margin ago, on the condition that it is still
//! the version read (`If-Match`); renewing it: the same, on the version this holder wrote
//! last. A write whose condition fails means another machine was first. Letting it go
//! writes it expired (never a delete, which is not conditional on S3: a delete could
//! remove a lease another machine took meanwhile).
//!
//! The lease keeps collections from doubling each other's work and records who collects;
//! what a collection deletes is safe beside another collection without it (`collect.rs`).

use std::time::Duration;

use bytes::Bytes;

use super::client::{Client, Condition, Part};
use super::pack_log::now_ms;
use crate::error::{Error, Result};

/// The lease file's name in the control folder.
const LEASE: &str = "lease";

/// A lease this machine holds.
pub(crate) struct Lease {
    holder: String,
    /// The version this holder wrote last.
    e_tag: String,
    /// When it runs out, by this machine's clock (ms since 1970).
    pub expires_ms: u64,
    /// How long each taking or renewal holds it.
    pub hold: Duration,
}

/// A lease as its file records it.
#[derive(Debug, PartialEq, Eq)]
struct Recorded {
    holder: String,
    expires_ms: u64,
}

fn encode(holder: &str, expires_ms: u64) -> Bytes {
    Bytes::from(format!("holder {holder}\nexpires {expires_ms}\n"))
}

/// The lease a file records; a file that does not parse counts as expired (a damaged
/// lease must not stop every collection for ever).
fn decode(bytes: &[u8]) -> Recorded {
    let text = String::from_utf8_lossy(bytes);
    let mut holder = String::new();
    let mut expires_ms = 0;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("holder", value)) => holder = value.to_string(),
            Some(("expires", value)) => expires_ms = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    Recorded { holder, expires_ms }
}

/// This process's name as a holder: host, process id and a random part (two handles of
/// one process are two holders).
pub(crate) fn holder_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string());
    let random: u32 = rand_u32();
    format!("{host}:{}:{random:08x}", std::process::id())
}

/// A random number from the standard library's hasher seed (no dependency for one value).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.finish() as u32
}

impl Lease {
    /// Takes the lease for `hold`, or says who holds it. `margin` is how far clocks may
    /// disagree: a lease is taken over only once it ran out that long ago.
    pub(crate) async fn take(
        client: &Client,
        holder: String,
        hold: Duration,
        margin: Duration,
    ) -> Result<Lease> {
        let expires_ms = now_ms() + hold.as_millis() as u64;
        let condition = match client.get_tagged(Part::Control, LEASE).await? {
            None => Condition::Absent,
            Some((bytes, tag)) => {
                let recorded = decode(&bytes);
                let free = recorded.holder == holder
                    || recorded.expires_ms + margin.as_millis() as u64 <= now_ms();
                if !free {
                    return Err(busy(client, &recorded, margin));
                }
                Condition::Unchanged(tag.unwrap_or_default())
            }
        };
        match client.put_if(Part::Control, LEASE, encode(&holder, expires_ms), condition).await? {
            Some(e_tag) => Ok(Lease { holder, e_tag, expires_ms, hold }),
            None => {
                // Another machine was first: say which.
                let recorded =
                    client.get_tagged(Part::Control, LEASE).await?.map_or(
                        Recorded { holder: "another machine".into(), expires_ms },
                        |(b, _)| decode(&b),
                    );
                Err(busy(client, &recorded, margin))
            }
        }
    }

    /// Extends the lease by `hold` from now; an error if it was lost (taken over after it
    /// ran out): the holder must stop.
    pub(crate) async fn renew(&mut self, client: &Client, hold: Duration) -> Result<()> {
        let expires_ms = now_ms() + hold.as_millis() as u64;
        let condition = Condition::Unchanged(self.e_tag.clone());
        match client
            .put_if(Part::Control, LEASE, encode(&self.holder, expires_ms), condition)
            .await?
        {
            Some(e_tag) => {
                self.e_tag = e_tag;
                self.expires_ms = expires_ms;
                Ok(())
            }
            None => Err(Error::Remote {
                operation: format!("renewing the collection lease of {}", client.url()),
                source: std::sync::Arc::new(std::io::Error::other(
                    "another machine took it over: this collection stops",
                )),
            }),
        }
    }

    /// Lets the lease go: writes it expired, if it is still this holder's.
    pub(crate) async fn release(self, client: &Client) -> Result<()> {
        let condition = Condition::Unchanged(self.e_tag);
        client.put_if(Part::Control, LEASE, encode(&self.holder, 0), condition).await.map(drop)
    }
}

fn busy(client: &Client, recorded: &Recorded, margin: Duration) -> Error {
    let held = recorded.expires_ms.saturating_sub(now_ms()) / 1000;
    let left = (recorded.expires_ms + margin.as_millis() as u64).saturating_sub(now_ms()) / 1000;
    Error::Remote {
        operation: format!("taking the collection lease of {}", client.url()),
        source: std::sync::Arc::new(std::io::Error::other(format!(
            "{} holds it: for {held} s more, and others wait {left} s in all (its lease and the \
             clock margin for machines whose clocks disagree); a collection or trim is running \
             there, or ran there and was killed: if that machine is gone, `objstash remote \
             break-lease` (RemoteTier::break_lease) clears it",
            recorded.holder
        ))),
    }
}

/// Clears the lease of a holder that is gone (killed): writes it expired, on the condition
/// that it is still the version read. Returns the holder it cleared, or `None` if nobody
/// held it. A live holder's next renewal then fails, and it stops.
pub(crate) async fn break_lease(client: &Client) -> Result<Option<String>> {
    let Some((bytes, tag)) = client.get_tagged(Part::Control, LEASE).await? else {
        return Ok(None);
    };
    let recorded = decode(&bytes);
    if recorded.expires_ms == 0 {
        return Ok(None);
    }
    let condition = Condition::Unchanged(tag.unwrap_or_default());
    match client.put_if(Part::Control, LEASE, encode("", 0), condition).await? {
        Some(_) => Ok(Some(recorded.holder)),
        // Taken or renewed meanwhile: a holder that is alive.
        None => Err(Error::Remote {
            operation: format!("clearing the collection lease of {}", client.url()),
            source: std::sync::Arc::new(std::io::Error::other(
                "its holder renewed it meanwhile: it is alive; nothing was cleared",
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_file_reads_back_and_a_damaged_one_is_expired() {
        let bytes = encode("host:12:00ab", 1_764_000_000_000);
        assert_eq!(
            decode(&bytes),
            Recorded { holder: "host:12:00ab".into(), expires_ms: 1_764_000_000_000 }
        );
        assert_eq!(decode(b"\xff garbage").expires_ms, 0);
        assert_ne!(holder_name(), holder_name());
    }
}
