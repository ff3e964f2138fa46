//! Damage found by a read or by verify, handed to the writer (`writer/damaged.rs`): a
//! damaged member of a model is dropped, so that its models read as incomplete in every
//! handle and process instead of promising an object no read can serve.

use crate::db::models;
use crate::error::Result;
use crate::key::Key;
use crate::report::stats::VerifyReport;
use crate::writer::{DropDamaged, DropDamagedQuietly, Message, asked, unasked};

use super::Stash;

impl Stash {
    /// A read found the row of `key` damaged: the writer drops it if it is a member of a
    /// model. The read's own error stands; nothing waits.
    pub(super) fn found_damaged(&self, key: &Key) {
        if !self.shared.models() || self.writer.is_none() {
            return;
        }
        let op = DropDamaged { keys: vec![*key], dicts: self.dicts.clone(), dropped: Vec::new() };
        // A writer that is gone drops nothing; the caller has the damage in its error.
        let _ = self.send(Message::Op(unasked(DropDamagedQuietly(op))));
    }

    /// Verify found `report.corrupt`: the members of models among them are dropped, and
    /// the report says which models lost which object.
    pub(super) fn drop_damaged_members(&self, report: &mut VerifyReport) -> Result<()> {
        if report.corrupt.is_empty() || !self.shared.models() || self.writer.is_none() {
            return Ok(());
        }
        let keys = report.corrupt.clone();
        let dicts = self.dicts.clone();
        let dropped =
            self.ask(|answer| asked(DropDamaged { keys, dicts, dropped: Vec::new() }, answer))?;
        let reader = self.readers.checkout()?;
        for key in dropped {
            for id in models::missing_in(&reader, &key, false)? {
                let Some(root) = models::by_id(&reader, id)?.and_then(|m| m.root) else {
                    continue;
                };
                report.problems.push(format!(
                    "model {root} lists the damaged object {key}, which was dropped: its root \
                     reads as absent until the object is saved again"
                ));
            }
        }
        Ok(())
    }
}
