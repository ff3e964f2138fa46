//! Where objects live: one table, or 256 tables bucketed by the first byte of the key.
//!
//! The layout is chosen when a stash is created and recorded in it; every table of a
//! layout has the same schema, so the rest of the crate only asks which table a key
//! belongs to. Table names are fixed here and nowhere else.

use crate::key::Key;
use crate::settings::parse::words;

/// How objects are spread over tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// One `objects` table. The default.
    #[default]
    Single,
    /// 256 tables `objects_00` to `objects_ff`, picked by the first byte of the key.
    Bucketed,
}

impl Layout {
    /// How many tables the layout has.
    pub(crate) fn table_count(self) -> usize {
        match self {
            Layout::Single => 1,
            Layout::Bucketed => 256,
        }
    }

    /// The index of the table that holds `key`.
    pub(crate) fn table_of(self, key: &Key) -> usize {
        match self {
            Layout::Single => 0,
            Layout::Bucketed => usize::from(key.as_bytes()[0]),
        }
    }

    /// The name of table `index`.
    pub(crate) fn table_name(self, index: usize) -> String {
        match self {
            Layout::Single => "objects".to_string(),
            Layout::Bucketed => format!("objects_{index:02x}"),
        }
    }

    /// The first key byte of the keys of the bucketed layout's table `name`; `None` for
    /// the single layout's table.
    pub(crate) fn bucket_of(name: &str) -> Option<u8> {
        let hex = name.strip_prefix("objects_")?;
        u8::from_str_radix(hex, 16).ok().filter(|_| hex.len() == 2)
    }
}

words!(Layout, "layout", "single or bucketed", {
    Single => "single",
    Bucketed => "bucketed",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_first_key_byte() {
        let mut key = [0u8; 32];
        for b in [0u8, 1, 0x7f, 0xff] {
            key[0] = b;
            let k = Key::from_bytes(key);
            assert_eq!(Layout::Bucketed.table_of(&k), usize::from(b));
            assert_eq!(Layout::Single.table_of(&k), 0);
        }
        assert_eq!(Layout::Bucketed.table_name(0xab), "objects_ab");
        assert_eq!(Layout::Bucketed.table_name(0), "objects_00");
        assert_eq!(Layout::Single.table_name(0), "objects");
    }

    #[test]
    fn words_round_trip() {
        for l in [Layout::Single, Layout::Bucketed] {
            assert_eq!(l.as_str().parse::<Layout>().unwrap(), l);
        }
        assert!("Single".parse::<Layout>().is_err());
    }
}
