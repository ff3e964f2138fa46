//! Every named object at once, read in file order: what a caller that lists the whole
//! cache asks for (Speckle's `GetAllObjects`). Each table is read by ranges of rowids in
//! parallel, one read transaction a range, every row decoded and checked where SQLite
//! holds it; nothing is looked up key by key (a `get_many` of every named key read 100,000
//! objects at 0.79x the speed of Speckle's own cache reading its text as it lies).

use std::collections::HashMap;

use rayon::prelude::*;

use super::Stash;
use crate::error::{DbContext, Result};
use crate::key::Key;

/// Rows one range reads.
const RANGE_ROWS: i64 = 4_096;

impl Stash {
    /// Every name with its object, read table by table in file order: in parallel ranges,
    /// each object decompressed and checked against its key, as [`Stash::get`] does. A
    /// name whose object is not stored (removed since, or the root of an incomplete model)
    /// is left out; an object under two names is listed under each. Waits for pending
    /// writes to commit; objects saved while it reads may or may not be listed. Counts a
    /// hit for each object listed.
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) for a damaged object;
    /// [`Error::Database`](crate::Error::Database) if a read fails.
    pub fn named_objects(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut names = self.names()?;
        let mut by_key: HashMap<Key, Vec<usize>> = HashMap::with_capacity(names.len());
        for (i, (_, key)) in names.iter().enumerate() {
            by_key.entry(*key).or_default().push(i);
        }
        let ranges = self.rowid_ranges()?;
        let read: Vec<Vec<(Key, Vec<u8>)>> = self.pool.install(|| {
            ranges
                .par_iter()
                .map(|&(table, start, end)| self.read_range(table, start, end, &by_key))
                .collect::<Result<_>>()
        })?;
        let mut listed = Vec::with_capacity(names.len());
        for (key, object) in read.into_iter().flatten() {
            // A key's row is read once: its names are taken, not copied.
            let Some(named) = by_key.get(&key) else { continue };
            for &i in &named[1..] {
                listed.push((std::mem::take(&mut names[i].0), object.clone()));
            }
            listed.push((std::mem::take(&mut names[named[0]].0), object));
        }
        self.shared.counts.read(listed.len(), listed.len());
        Ok(listed)
    }

    /// Every table's rowids, cut into ranges `(table, start, end)` of [`RANGE_ROWS`].
    fn rowid_ranges(&self) -> Result<Vec<(usize, i64, i64)>> {
        let reader = self.readers.checkout()?;
        let mut ranges = Vec::new();
        for (i, table) in self.shared.schema.tables.iter().enumerate() {
            let last: Option<i64> = reader
                .query_row(&format!("SELECT max(rowid) FROM {}", table.name), [], |r| r.get(0))
                .context(|| format!("reading the extent of {}", table.name))?;
            let mut start = 0;
            while last.is_some_and(|last| start <= last) {
                ranges.push((i, start, start + RANGE_ROWS));
                start += RANGE_ROWS;
            }
        }
        Ok(ranges)
    }

    /// The objects among rows `start..end` of table `table` whose keys are in `wanted`,
    /// decoded and checked, in one read transaction.
    fn read_range(
        &self,
        table: usize,
        start: i64,
        end: i64,
        wanted: &HashMap<Key, Vec<usize>>,
    ) -> Result<Vec<(Key, Vec<u8>)>> {
        let table = &self.shared.schema.tables[table];
        self.readers.checkout()?.in_transaction(|conn| {
            let sql = &table.models.run;
            let mut stmt = conn.prepare_cached(sql).context(|| table.name.clone())?;
            let mut rows = stmt.query([start, end]).context(|| table.name.clone())?;
            let mut objects = Vec::new();
            while let Some(row) = rows.next().context(|| table.name.clone())? {
                let row = sql.columns.read(row);
                let key = row.key().context(|| table.name.clone())?;
                let Some(key) = key.filter(|key| wanted.contains_key(key)) else { continue };
                let read = (|| -> rusqlite::Result<_> {
                    Ok((row.raw_len()?, row.data()?, row.place()?))
                })();
                let (raw_len, data, place) = read.context(|| table.name.clone())?;
                objects.push((key, self.decode_row(&key, raw_len, data, place)?));
            }
            Ok(objects)
        })
    }
}
