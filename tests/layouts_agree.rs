//! Both layouts give the same answers as a plain in-memory map for any sequence of
//! operations, including reopening.

mod common;

use std::collections::HashMap;

use objstash::{Durability, Key, Layout, Stash};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Save(u8),
    SaveAll(Vec<u8>),
    Get(u8),
    GetMany(Vec<u8>),
    Missing(Vec<u8>),
    Remove(u8),
    Flush,
    Reopen,
}

/// Object `i` of a small universe, so operations hit the same keys often.
fn object(i: u8) -> Vec<u8> {
    if i == 0 {
        Vec::new()
    } else {
        format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(usize::from(i) * 3)).into_bytes()
    }
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..40;
    prop_oneof![
        4 => id.clone().prop_map(Op::Save),
        2 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::SaveAll),
        3 => id.clone().prop_map(Op::Get),
        1 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::GetMany),
        1 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::Missing),
        2 => id.prop_map(Op::Remove),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

fn open(dir: &std::path::Path, layout: Layout) -> Stash {
    Stash::builder()
        .layout(layout)
        .durability(if layout == Layout::Single { Durability::Fast } else { Durability::Safe })
        .open(dir.join("s.db"))
        .expect("open")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn layouts_match_a_model(ops in prop::collection::vec(op(), 1..60)) {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut stashes: Vec<Option<Stash>> =
            vec![Some(open(dirs[0].path(), Layout::Single)), Some(open(dirs[1].path(), Layout::Bucketed))];
        let mut model: HashMap<Key, Vec<u8>> = HashMap::new();
        for op in ops {
            let key = |i: u8| Key::of(&object(i));
            match &op {
                Op::Save(i) => {
                    model.insert(key(*i), object(*i));
                }
                Op::SaveAll(ids) => {
                    for i in ids {
                        model.insert(key(*i), object(*i));
                    }
                }
                _ => {}
            }
            let mut answers = Vec::new();
            for (n, slot) in stashes.iter_mut().enumerate() {
                let stash = slot.as_ref().unwrap();
                let answer = match &op {
                    Op::Save(i) => format!("{:?}", stash.save(&object(*i)).unwrap()),
                    Op::SaveAll(ids) => {
                        let objs: Vec<Vec<u8>> = ids.iter().map(|i| object(*i)).collect();
                        format!("{:?}", stash.save_all(&objs).unwrap())
                    }
                    Op::Get(i) => {
                        let got = stash.get(&key(*i)).unwrap();
                        prop_assert_eq!(&got, &model.get(&key(*i)).cloned());
                        format!("{got:?}")
                    }
                    Op::GetMany(ids) => {
                        let keys: Vec<Key> = ids.iter().map(|i| key(*i)).collect();
                        let got = stash.get_many(&keys).unwrap();
                        let want: Vec<Option<Vec<u8>>> = keys.iter().map(|k| model.get(k).cloned()).collect();
                        prop_assert_eq!(&got, &want);
                        format!("{got:?}")
                    }
                    Op::Missing(ids) => {
                        let keys: Vec<Key> = ids.iter().map(|i| key(*i)).collect();
                        let got = stash.missing(&keys).unwrap();
                        let want: Vec<Key> = keys.iter().filter(|k| !model.contains_key(k)).copied().collect();
                        prop_assert_eq!(&got, &want);
                        format!("{got:?}")
                    }
                    Op::Remove(i) => format!("{}", stash.remove(&key(*i)).unwrap()),
                    Op::Flush => {
                        stash.flush().unwrap();
                        String::new()
                    }
                    Op::Reopen => {
                        slot.take().unwrap().close().unwrap();
                        let layout = if n == 0 { Layout::Single } else { Layout::Bucketed };
                        *slot = Some(open(dirs[n].path(), layout));
                        String::new()
                    }
                };
                answers.push(answer);
            }
            if let Op::Remove(i) = op {
                prop_assert_eq!(&answers[0], &model.remove(&key(i)).is_some().to_string());
            }
            prop_assert_eq!(&answers[0], &answers[1], "layouts disagree on {:?}", op);
            for slot in &stashes {
                prop_assert_eq!(slot.as_ref().unwrap().len().unwrap(), model.len() as u64);
            }
        }
    }
}
