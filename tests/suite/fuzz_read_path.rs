//! Fuzzing with proptest: arbitrary bytes stored as a row never make a read panic or return
//! bytes that do not hash to the key; arbitrary sequences of operations, with reopens,
//! agree with an in-memory model.

use std::collections::HashMap;

use objstash::{Codec, Error, Key, Stash};
use proptest::prelude::*;
use rusqlite::{Connection, params};

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_rows_are_read_safely(
        rows in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..300), 0u64..5_000, any::<bool>()), 1..8)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let stash = Stash::open(&path).unwrap();
        let mut keys = Vec::new();
        for (i, _) in rows.iter().enumerate() {
            keys.push(stash.save(format!("object {i}").as_bytes()).unwrap());
        }
        stash.close().unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            for ((data, raw_len, gz_header), key) in rows.iter().zip(&keys) {
                let mut data = data.clone();
                if *gz_header && data.len() > 10 {
                    // Start like gzip so the fuzzer reaches the deflate decoder.
                    data[..4].copy_from_slice(&[0x1f, 0x8b, 8, 0]);
                }
                conn.execute(
                    "UPDATE objects SET data = ?1, raw_len = ?2 WHERE key = ?3",
                    params![data, *raw_len as i64, &key.as_bytes()[..]],
                ).unwrap();
            }
        }
        let stash = Stash::open(&path).unwrap();
        for key in &keys {
            match stash.get(key) {
                Ok(Some(bytes)) => prop_assert_eq!(Key::of(&bytes), *key),
                Ok(None) => prop_assert!(false, "a stored row vanished"),
                Err(Error::Corrupt { key: k, .. }) => prop_assert_eq!(k, *key),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
        let report = stash.verify().unwrap();
        prop_assert_eq!(report.checked, keys.len() as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Rows written with a zstd dictionary, then damaged: flipped bytes anywhere (the frame
    /// header, its dictionary id, the compressed blocks), optionally cut short.
    #[test]
    fn damaged_zstd_rows_are_read_safely(
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..12),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.db");
        let objs = speckle_gen::objects(70, 0, 150);
        let stash = Stash::builder()
            .codec(Codec::ZstdDict)
            .dictionary_sample(100 << 10)
            .open(&path)
            .unwrap();
        // One by one: the save that fills the sample trains, and every later one uses it.
        let keys: Vec<Key> = objs.iter().map(|o| stash.save(o).unwrap()).collect();
        stash.close().unwrap();
        let key = *keys.last().unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            let mut data: Vec<u8> = conn
                .query_row("SELECT data FROM objects WHERE key = ?1", [&key.as_bytes()[..]], |r| r.get(0))
                .unwrap();
            prop_assert_eq!(&data[..4], &[0x28, 0xb5, 0x2f, 0xfd][..], "the last row is zstd");
            for (at, xor) in &flips {
                let i = at.index(data.len());
                data[i] ^= xor;
            }
            if let Some(cut) = cut {
                data.truncate(cut.index(data.len()));
            }
            conn.execute(
                "UPDATE objects SET data = ?1 WHERE key = ?2",
                params![data, &key.as_bytes()[..]],
            ).unwrap();
        }
        let stash = Stash::open(&path).unwrap();
        match stash.get(&key) {
            Ok(Some(bytes)) => prop_assert_eq!(&bytes, objs.last().unwrap()),
            Ok(None) => prop_assert!(false, "a stored row vanished"),
            Err(Error::Corrupt { key: k, .. }) => prop_assert_eq!(k, key),
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Save(Vec<u8>),
    Get(usize),
    Remove(usize),
    Flush,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec(any::<u8>(), 0..2_000).prop_map(Op::Save),
        3 => any::<usize>().prop_map(Op::Get),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn operation_sequences_match_a_model(ops in prop::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let mut stash = Some(Stash::open(&path).unwrap());
        let mut model: HashMap<Key, Vec<u8>> = HashMap::new();
        let mut seen: Vec<Key> = Vec::new();
        for op in ops {
            let s = stash.as_ref().unwrap();
            match op {
                Op::Save(bytes) => {
                    let key = s.save(&bytes).unwrap();
                    prop_assert_eq!(key, Key::of(&bytes));
                    seen.push(key);
                    model.insert(key, bytes);
                }
                Op::Get(i) if !seen.is_empty() => {
                    let key = seen[i % seen.len()];
                    prop_assert_eq!(s.get(&key).unwrap(), model.get(&key).cloned());
                }
                Op::Remove(i) if !seen.is_empty() => {
                    let key = seen[i % seen.len()];
                    prop_assert_eq!(s.remove(&key).unwrap(), model.remove(&key).is_some());
                }
                Op::Flush => s.flush().unwrap(),
                Op::Reopen => {
                    stash.take().unwrap().close().unwrap();
                    stash = Some(Stash::open(&path).unwrap());
                }
                _ => {}
            }
        }
        prop_assert_eq!(stash.as_ref().unwrap().len().unwrap(), model.len() as u64);
    }
}
