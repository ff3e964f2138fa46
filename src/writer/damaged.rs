//! Damage found by a read: a member of a model whose row no longer decodes to its key can
//! never be served, so its models must not be read as complete. The reader that found it
//! tells the writer, which checks the row again in its own transaction (it may have been
//! saved again meanwhile) and drops it; dropping a member makes its models incomplete and
//! their roots absent (`models.rs`, `lost_member`), in every handle and process, until the
//! object is saved again. A loose object stays as it is: its damage is its own, and
//! `repair` deals with it.

use std::sync::Arc;

use super::op::{Request, Unasked};
use super::stop::{Stop, StopContext};
use super::tx::Tx;
use crate::check::intact_row;
use crate::codec::zstd_dict::Dictionaries;
use crate::db::row::Place;
use crate::key::Key;

/// Drops the damaged rows of `keys` that are members of models; answers the keys dropped.
pub(crate) struct DropDamaged {
    pub keys: Vec<Key>,
    /// To check each row again.
    pub dicts: Arc<Dictionaries>,
    pub dropped: Vec<Key>,
}

impl Request for DropDamaged {
    type Answer = Vec<Key>;

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        self.dropped.clear();
        for key in &self.keys {
            if tx.drop_damaged_member(key, &self.dicts)? {
                self.dropped.push(*key);
            }
        }
        Ok(())
    }

    fn answer(self) -> Vec<Key> {
        self.dropped
    }
}

/// [`DropDamaged`] for a read that does not wait: its caller has its error already.
pub(crate) struct DropDamagedQuietly(pub DropDamaged);

impl Unasked for DropDamagedQuietly {
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), Stop> {
        Request::apply(&mut self.0, tx)
    }
}

impl Tx<'_> {
    /// Drops the row of `key` if it is a member of a model and still damaged; whether it did.
    fn drop_damaged_member(&mut self, key: &Key, dicts: &Dictionaries) -> Result<bool, Stop> {
        if !self.models_on() {
            return Ok(false);
        }
        let Some(found) = self.find(key)? else { return Ok(false) };
        if found.model.is_none() {
            return Ok(false);
        }
        let table = self.shared.schema.table(key);
        let sql = &table.models.by_rowid;
        let (raw_len, data, place) = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.query_row([found.rowid], |r| {
                    let row = sql.columns.read(r);
                    Ok((row.raw_len()?, row.data()?.to_vec(), row.packed_place()?))
                })
            })
            .stop(|| format!("reading {key} again"))?;
        let place = place.and_then(Place::unpack);
        if intact_row(self.shared.values.as_ref(), dicts, key, raw_len, &data, place) {
            return Ok(false);
        }
        let names = self.names_table()?;
        let dropped = self.delete(key, names)?;
        if dropped {
            log::warn!(
                "objstash: {key} is damaged and was dropped; the models that list it read as \
                 absent until it is saved again"
            );
        }
        Ok(dropped)
    }
}
