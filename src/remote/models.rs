//! Models on the remote: a pushed model's members, so that a trim keeps or takes out a
//! model whole. A machine that reads one object of a model uses the model (as a read of
//! a member does in a stash, `notes/models.md`); a trim counts each object's last use as
//! the latest of its own and of every model that lists it, so the packs of a used model's
//! members stay with it, and a shared object goes when its last model goes.
//!
//! A model is a file `models/<root hex>` (written once, by the first push that finds all
//! its objects on the remote):
//!
//! ```text
//! "OSTMODL1" | members u32 | member keys [32 each] | blake3 of all before [..8]
//! ```
//!
//! A file that does not check is left alone and its model counts as not there. A trim
//! deletes the file of a model whose root it took out.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use futures::StreamExt;

use super::client::Part;
use super::{READS_IN_FLIGHT, Remote};
use crate::error::Result;
use crate::key::Key;

const MAGIC: &[u8; 8] = b"OSTMODL1";
const CHECK: usize = 8;

/// The file of a model of `members` (the root among them or not).
pub(crate) fn encode(members: &[Key]) -> Bytes {
    let count = u32::try_from(members.len()).expect("a model lists fewer than 2^32 objects");
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + 32 * members.len() + CHECK);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&count.to_le_bytes());
    for key in members {
        out.extend_from_slice(key.as_bytes());
    }
    let check = blake3::hash(&out);
    out.extend_from_slice(&check.as_bytes()[..CHECK]);
    Bytes::from(out)
}

/// The members a model's file lists, or why it cannot be read.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Key>, String> {
    let body_len = bytes.len().checked_sub(CHECK).ok_or("shorter than its header")?;
    let (body, check) = bytes.split_at(body_len);
    if &blake3::hash(body).as_bytes()[..CHECK] != check {
        return Err("its check does not match: damaged".to_string());
    }
    let rest = body.strip_prefix(&MAGIC[..]).ok_or("not a model's file")?;
    let (count, keys) = rest.split_at_checked(4).ok_or("shorter than its header")?;
    let count = u32::from_le_bytes(count.try_into().expect("four bytes")) as usize;
    if keys.len() != count * 32 {
        return Err(format!("{} bytes for {count} members", keys.len()));
    }
    Ok(keys.chunks(32).filter_map(Key::from_slice).collect())
}

impl Remote {
    /// Roots of the models the remote has files for.
    pub(crate) fn model_roots(&self) -> Result<HashSet<Key>> {
        let files = self.runtime.block_on(self.client.list(Part::Models))?;
        Ok(files.iter().filter_map(|f| f.name.parse().ok()).collect())
    }

    /// Uploads the file of each model (`root`, every member): the models pushed.
    pub(crate) fn put_models(&self, models: &[(Key, Vec<Key>)]) -> Result<u64> {
        self.runtime.block_on(async {
            let puts = futures::stream::iter(models.iter().map(|(root, members)| async move {
                self.client.put(Part::Models, &root.to_string(), encode(members), false).await
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
            for put in puts {
                put?;
            }
            Ok(models.len() as u64)
        })
    }

    /// Every model the remote has a readable file for: root and members.
    pub(crate) fn read_models(&self) -> Result<Vec<(Key, Vec<Key>)>> {
        let roots: Vec<Key> = self.model_roots()?.into_iter().collect();
        let read = self.runtime.block_on(async {
            futures::stream::iter(roots.iter().map(|root| async move {
                (root, self.client.get_if_there(Part::Models, &root.to_string()).await)
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
        });
        let mut models = Vec::with_capacity(read.len());
        for (root, bytes) in read {
            let Some(bytes) = bytes? else { continue };
            match decode(&bytes) {
                Ok(members) => models.push((*root, members)),
                // Left alone: neither trusted nor deleted.
                Err(reason) => log::warn!("model {root} on {}: {reason}", self.url()),
            }
        }
        Ok(models)
    }

    /// Deletes the files of the models whose root is among `gone`.
    pub(crate) fn delete_models(&self, gone: &[Key]) -> Result<()> {
        self.runtime.block_on(async {
            let deletes = futures::stream::iter(gone.iter().map(|root| async move {
                self.client.delete(Part::Models, &root.to_string()).await
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
            for delete in deletes {
                delete?;
            }
            Ok(())
        })
    }
}

/// Raises each object's last use in `uses` to the latest use of any model that lists it
/// (the root counts as a member): a read of one object uses its models.
pub(crate) fn spread_uses(models: &[(Key, Vec<Key>)], uses: &mut HashMap<Key, u64>) {
    let all = |(root, members): &(Key, Vec<Key>)| {
        members.iter().chain(std::iter::once(root)).copied().collect::<Vec<Key>>()
    };
    // Each model's last use from the objects' own (a read of one model is not a use of
    // another that shares an object with it), then spread.
    let latest: Vec<Option<u64>> = models
        .iter()
        .map(|model| all(model).iter().filter_map(|k| uses.get(k).copied()).max())
        .collect();
    for (model, latest) in models.iter().zip(latest) {
        let Some(latest) = latest else { continue };
        for key in all(model) {
            let at = uses.entry(key).or_insert(latest);
            *at = (*at).max(latest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_file_round_trips_and_damage_is_refused() {
        let members: Vec<Key> = (0..5u8).map(|i| Key::of(&[i])).collect();
        let bytes = encode(&members);
        assert_eq!(decode(&bytes).unwrap(), members);
        let mut damaged = bytes.to_vec();
        damaged[12] ^= 1;
        assert!(decode(&damaged).is_err());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_use_of_one_member_uses_every_member_and_a_shared_one_keeps_the_latest() {
        let k = |i: u8| Key::of(&[i]);
        let models = vec![(k(0), vec![k(1), k(2)]), (k(10), vec![k(2), k(11)])];
        let mut uses = HashMap::from([(k(1), 100), (k(11), 50), (k(2), 10)]);
        spread_uses(&models, &mut uses);
        assert_eq!((uses[&k(0)], uses[&k(1)], uses[&k(2)]), (100, 100, 100));
        assert_eq!((uses[&k(10)], uses[&k(11)]), (50, 50));
    }
}
