//! Moving young key indexes into old ones (format 5, `key_index.rs`).
//!
//! Every insert puts its key's prefix and rowid into the young index, which stays small
//! enough for the cache. Once it holds `young_keys` keys, the writer moves its entries into
//! the old index, one slice of the key space per transaction, between batches: the slice's entries are copied in key order and
//! deleted from the young index in the same transaction, so at every commit each key is in
//! exactly one of the two and readers (which look in both) always find it. Each page of
//! the old index is then rewritten once per slice, where random inserts would rewrite it
//! once per few batches. A killed move leaves the slices not yet moved in the young index;
//! the next writer moves them.

use rusqlite::params;

use super::state::Writer;
use super::stop::{Failure, StopContext};
use crate::db::format;
use crate::db::key_filter;
use crate::db::key_index::{KeyIndex, OLD, YOUNG};
use crate::db::meta;

/// Old index bytes one slice may rewrite at most (a slice is one transaction, logged whole).
const SLICE_BYTES: u64 = 32 << 20;
/// Bytes of one old index entry on its page (prefix, rowid, record and cell overhead, page
/// fill): sizes the slices.
const ENTRY_BYTES: u64 = 34;

impl Writer {
    /// Moves one slice of the young index into the old one if a move is owed, first
    /// counting the young index once enough rows were added since it was last counted.
    /// Whether more is owed.
    pub(super) fn move_young(&mut self) -> Result<bool, Failure> {
        if self.shared.schema.key_index() != KeyIndex::Generations {
            return Ok(false);
        }
        if self.moves.slices.is_empty() {
            // Other processes add rows too: counting every quarter of the young limit this
            // writer adds bounds how far past the limit the young index grows.
            if self.objects < self.moves.counted_at + self.moves.young_keys / 4 {
                return Ok(false);
            }
            self.plan_moves()?;
            if self.moves.slices.is_empty() {
                return Ok(false);
            }
        }
        let (from, to) = *self.moves.slices.front().expect("checked above");
        let range = match to {
            Some(_) => "prefix >= ?1 AND prefix < ?2",
            None => "prefix >= ?1 AND ?2 IS NULL",
        };
        let copy = format!(
            "INSERT OR IGNORE INTO {OLD}(prefix, id) \
             SELECT prefix, id FROM {YOUNG} WHERE {range} ORDER BY prefix, id"
        );
        let delete = format!("DELETE FROM {YOUNG} WHERE {range}");
        let listing = format!("SELECT prefix FROM {YOUNG} WHERE {range}");
        let (from, to) = (from.to_be_bytes(), to.map(u64::to_be_bytes));
        let filtered = self.filter.is_some();
        let (prefixes, moves) = self.transaction(|writer| {
            // Since format 7 every move counts itself, so that writers' filters of the old
            // index see it (`key_filter.rs`), and takes the prefixes it moves into its own.
            format::raise(&writer.conn, format::COUNTED_MOVES)?;
            let moves = meta::count_one(&writer.conn, key_filter::MOVES)?;
            let mut prefixes = Vec::new();
            if filtered {
                let mut stmt = writer
                    .conn
                    .prepare_cached(&listing)
                    .stop(|| "listing young keys to move".into())?;
                let mut rows = stmt
                    .query(params![&from[..], to.as_ref().map(|t| &t[..])])
                    .stop(|| "listing young keys to move".into())?;
                while let Some(row) = rows.next().stop(|| "listing young keys to move".into())? {
                    let prefix: Vec<u8> = row.get(0).stop(|| "reading a young key".into())?;
                    prefixes.push(prefix);
                }
            }
            for sql in [&copy, &delete] {
                writer
                    .conn
                    .prepare_cached(sql)
                    .and_then(|mut stmt| {
                        stmt.execute(params![&from[..], to.as_ref().map(|t| &t[..])])
                    })
                    .stop(|| "moving young keys into the old index".into())?;
            }
            Ok((prefixes, moves))
        })?;
        // The filter follows this move if it had seen every move before it.
        match &mut self.filter {
            Some(filter) if filter.moves + 1 == moves => {
                for prefix in &prefixes {
                    filter.insert(prefix);
                }
                filter.moves = moves;
            }
            _ => self.filter = None,
        }
        self.moves.slices.pop_front();
        self.checkpoint_owed = true;
        Ok(!self.moves.slices.is_empty())
    }

    /// Counts the young index; if it holds more than the limit, plans its move in slices of
    /// at most [`SLICE_BYTES`] of old index.
    fn plan_moves(&mut self) -> Result<(), Failure> {
        self.moves.counted_at = self.objects;
        let young: i64 = self
            .conn
            .query_row(&format!("SELECT count(*) FROM {YOUNG}"), [], |r| r.get(0))
            .stop(|| "counting the young keys".into())?;
        if (young.max(0) as u64) < self.moves.young_keys {
            return Ok(());
        }
        let slices = (self.objects * ENTRY_BYTES).div_ceil(SLICE_BYTES).clamp(1, 1 << 16);
        // Slice i starts at i * 2^64 / slices.
        let start = |i: u64| ((u128::from(i) << 64) / u128::from(slices)) as u64;
        for i in 0..slices {
            self.moves.slices.push_back((start(i), (i + 1 < slices).then(|| start(i + 1))));
        }
        Ok(())
    }
}
