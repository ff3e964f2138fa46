//! A set of object rows, `(table, rowid)`, kept as runs of consecutive rowids: how a model
//! lists its members (`models.rs`).
//!
//! The objects of a model are saved together, so their rows are appended together and
//! their rowids run on: a model of 100,000 objects saved in one go is a handful of runs, a
//! few bytes, however many objects it lists. Reading the runs in order reads the rows in
//! the order of the file (`Stash::read_model`). Encoded as varints: the number of tables,
//! then per table its index, its number of runs and each run's gap from the previous one's
//! end and its length.

use std::collections::BTreeMap;

/// Rows as runs of rowids, by table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Runs {
    /// Per table, sorted disjoint half-open ranges `[start, end)` that do not touch.
    tables: BTreeMap<u16, Vec<(i64, i64)>>,
}

impl Runs {
    /// Whether the set holds no row.
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.values().all(Vec::is_empty)
    }

    /// How many rows the set holds.
    pub(crate) fn len(&self) -> u64 {
        self.tables.values().flatten().map(|(start, end)| (end - start) as u64).sum()
    }

    /// Whether the row `rowid` of `table` is in the set.
    pub(crate) fn contains(&self, table: u16, rowid: i64) -> bool {
        let Some(runs) = self.tables.get(&table) else { return false };
        let at = runs.partition_point(|(_, end)| *end <= rowid);
        runs.get(at).is_some_and(|(start, _)| *start <= rowid)
    }

    /// Adds a row; whether it was not in the set.
    pub(crate) fn insert(&mut self, table: u16, rowid: i64) -> bool {
        let runs = self.tables.entry(table).or_default();
        let at = runs.partition_point(|(_, end)| *end < rowid);
        match runs.get(at).copied() {
            Some((start, end)) if start <= rowid && rowid < end => return false,
            Some((start, end)) if end == rowid => {
                runs[at] = (start, end + 1);
                // The run may now touch the next one.
                if let Some(&(next_start, next_end)) = runs.get(at + 1)
                    && next_start == end + 1
                {
                    runs[at] = (start, next_end);
                    runs.remove(at + 1);
                }
            }
            Some((start, end)) if start == rowid + 1 => runs[at] = (rowid, end),
            _ => runs.insert(at, (rowid, rowid + 1)),
        }
        true
    }

    /// Takes a row out; whether it was in the set.
    pub(crate) fn remove(&mut self, table: u16, rowid: i64) -> bool {
        let Some(runs) = self.tables.get_mut(&table) else { return false };
        let at = runs.partition_point(|(_, end)| *end <= rowid);
        let Some(&(start, end)) = runs.get(at) else { return false };
        if rowid < start {
            return false;
        }
        match (start == rowid, end == rowid + 1) {
            (true, true) => {
                runs.remove(at);
            }
            (true, false) => runs[at] = (rowid + 1, end),
            (false, true) => runs[at] = (start, rowid),
            (false, false) => {
                runs[at] = (start, rowid);
                runs.insert(at + 1, (rowid + 1, end));
            }
        }
        if runs.is_empty() {
            self.tables.remove(&table);
        }
        true
    }

    /// Adds every row of `other`.
    pub(crate) fn extend(&mut self, other: &Runs) {
        for (table, rowid) in other.rows() {
            self.insert(table, rowid);
        }
    }

    /// Every row, by table then rowid.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (u16, i64)> + '_ {
        self.tables.iter().flat_map(|(table, runs)| {
            runs.iter().flat_map(move |&(s, e)| (s..e).map(move |r| (*table, r)))
        })
    }

    /// The runs, by table then rowid: `(table, first rowid, rowid past the last)`.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (u16, i64, i64)> + '_ {
        self.tables.iter().flat_map(|(table, runs)| runs.iter().map(move |&(s, e)| (*table, s, e)))
    }

    /// The set as bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let tables: Vec<_> = self.tables.iter().filter(|(_, runs)| !runs.is_empty()).collect();
        put(&mut out, tables.len() as u64);
        for (table, runs) in tables {
            put(&mut out, u64::from(*table));
            put(&mut out, runs.len() as u64);
            let mut last = 0i64;
            for &(start, end) in runs {
                put(&mut out, (start - last) as u64);
                put(&mut out, (end - start) as u64);
                last = end;
            }
        }
        out
    }

    /// The set `encode` wrote; `None` for bytes it did not write (damage).
    pub(crate) fn decode(mut bytes: &[u8]) -> Option<Runs> {
        let mut runs = Runs::default();
        let count = take(&mut bytes)?;
        for _ in 0..count {
            let table = u16::try_from(take(&mut bytes)?).ok()?;
            let n = take(&mut bytes)?;
            let mut list = Vec::with_capacity(usize::try_from(n).ok()?.min(1 << 16));
            let mut last = 0i64;
            for _ in 0..n {
                let start = last.checked_add(i64::try_from(take(&mut bytes)?).ok()?)?;
                let end = start.checked_add(i64::try_from(take(&mut bytes)?).ok()?)?;
                if end <= start || (!list.is_empty() && start <= last) {
                    return None;
                }
                list.push((start, end));
                last = end;
            }
            if runs.tables.insert(table, list).is_some() {
                return None;
            }
        }
        bytes.is_empty().then_some(runs)
    }
}

impl FromIterator<(u16, i64)> for Runs {
    fn from_iter<I: IntoIterator<Item = (u16, i64)>>(rows: I) -> Self {
        let mut runs = Runs::default();
        for (table, rowid) in rows {
            runs.insert(table, rowid);
        }
        runs
    }
}

/// Appends `value` as a LEB128 varint.
fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Takes a LEB128 varint off the front of `bytes`.
fn take(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeSet;

    #[test]
    fn runs_hold_exactly_the_rows_put_in_and_take_few_bytes() {
        let mut runs = Runs::default();
        let mut truth = BTreeSet::new();
        // A model saved in one go, then shared rows here and there, then some taken out.
        for rowid in 1_000..101_000 {
            runs.insert(0, rowid);
            truth.insert((0, rowid));
        }
        assert!(runs.encode().len() < 12, "{} bytes", runs.encode().len());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (table, rowid) = ((state % 3) as u16, (state >> 20) as i64 % 300_000);
            if state & (1 << 40) == 0 {
                assert_eq!(runs.insert(table, rowid), truth.insert((table, rowid)));
            } else {
                assert_eq!(runs.remove(table, rowid), truth.remove(&(table, rowid)));
            }
            assert_eq!(runs.contains(table, rowid), truth.contains(&(table, rowid)));
        }
        assert_eq!(runs.rows().collect::<Vec<_>>(), truth.iter().copied().collect::<Vec<_>>());
        assert_eq!(runs.len(), truth.len() as u64);
        let bytes = runs.encode();
        assert_eq!(Runs::decode(&bytes), Some(runs.clone()));
        // Damage is refused, never misread as another set.
        for cut in 0..bytes.len() {
            assert_ne!(Runs::decode(&bytes[..cut]).as_ref(), Some(&runs));
        }
        assert_eq!(Runs::decode(&[1, 0, 1, 5, 0]), None, "an empty run");
        let from: Runs = truth.iter().copied().collect();
        assert_eq!(from, runs);
    }
}
