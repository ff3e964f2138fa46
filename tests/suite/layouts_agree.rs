//! Both layouts in both durability modes give the same answers as a plain in-memory map for any sequence of
//! operations, names included, and reopening.

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
    /// Save objects under names: (name, object) pairs.
    SaveNamed(Vec<(u8, u8)>),
    GetNamed(Vec<u8>),
    RemoveNamed(Vec<u8>),
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

fn name(n: u8) -> String {
    format!("name-{n}")
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..40;
    prop_oneof![
        4 => id.clone().prop_map(Op::Save),
        2 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::SaveAll),
        3 => id.clone().prop_map(Op::Get),
        1 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::GetMany),
        1 => prop::collection::vec(id.clone(), 0..20).prop_map(Op::Missing),
        2 => id.clone().prop_map(Op::Remove),
        3 => prop::collection::vec((0u8..12, id.clone()), 0..8).prop_map(Op::SaveNamed),
        2 => prop::collection::vec(0u8..12, 0..8).prop_map(Op::GetNamed),
        1 => prop::collection::vec(0u8..12, 0..4).prop_map(Op::RemoveNamed),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

/// Every layout with every durability, varied independently.
const CONFIGS: [(Layout, Durability); 4] = [
    (Layout::Single, Durability::Fast),
    (Layout::Single, Durability::Safe),
    (Layout::Bucketed, Durability::Fast),
    (Layout::Bucketed, Durability::Safe),
];

fn open(dir: &std::path::Path, (layout, durability): (Layout, Durability)) -> Stash {
    Stash::builder().layout(layout).durability(durability).open(dir.join("s.db")).expect("open")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn layouts_match_a_model(ops in prop::collection::vec(op(), 1..60)) {
        let dirs: Vec<tempfile::TempDir> = CONFIGS.iter().map(|_| tempfile::tempdir().unwrap()).collect();
        let mut stashes: Vec<Option<Stash>> =
            CONFIGS.iter().zip(&dirs).map(|(config, dir)| Some(open(dir.path(), *config))).collect();
        let mut model: HashMap<Key, Vec<u8>> = HashMap::new();
        let mut names: HashMap<u8, Key> = HashMap::new();
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
                Op::SaveNamed(pairs) => {
                    for (n, i) in pairs {
                        model.insert(key(*i), object(*i));
                        names.insert(*n, key(*i));
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
                    Op::SaveNamed(pairs) => {
                        let items: Vec<(String, Vec<u8>)> =
                            pairs.iter().map(|(n, i)| (name(*n), object(*i))).collect();
                        format!("{:?}", stash.save_named(&items).unwrap())
                    }
                    Op::GetNamed(ns) => {
                        let asked: Vec<String> = ns.iter().map(|n| name(*n)).collect();
                        let got = stash.get_named(&asked).unwrap();
                        let want: Vec<Option<Vec<u8>>> =
                            ns.iter().map(|n| names.get(n).and_then(|k| model.get(k)).cloned()).collect();
                        prop_assert_eq!(&got, &want);
                        let missing = stash.missing_named(&asked).unwrap();
                        let want: Vec<&String> =
                            asked.iter().zip(ns).filter(|(_, n)| !names.contains_key(n)).map(|(a, _)| a).collect();
                        prop_assert_eq!(&missing, &want);
                        format!("{got:?}")
                    }
                    Op::RemoveNamed(ns) => {
                        let asked: Vec<String> = ns.iter().map(|n| name(*n)).collect();
                        format!("{:?}", stash.remove_named(&asked).unwrap())
                    }
                    Op::Flush => {
                        stash.flush().unwrap();
                        String::new()
                    }
                    Op::Reopen => {
                        let report = stash.verify().unwrap();
                        prop_assert!(report.is_ok(), "{}", report);
                        slot.take().unwrap().close().unwrap();
                        *slot = Some(open(dirs[n].path(), CONFIGS[n]));
                        String::new()
                    }
                };
                answers.push(answer);
            }
            match &op {
                Op::Remove(i) => {
                    prop_assert_eq!(&answers[0], &model.remove(&key(*i)).is_some().to_string());
                    // Removing an object drops its names.
                    names.retain(|_, k| *k != key(*i));
                }
                Op::RemoveNamed(ns) => {
                    let mut seen = Vec::new();
                    for n in ns {
                        seen.push(names.remove(n).is_some());
                    }
                    prop_assert_eq!(&answers[0], &format!("{seen:?}"));
                }
                _ => {}
            }
            for (config, answer) in CONFIGS.iter().zip(&answers).skip(1) {
                prop_assert_eq!(&answers[0], answer, "{:?} disagrees on {:?}", config, op);
            }
            for slot in &stashes {
                let stats = slot.as_ref().unwrap().stats().unwrap();
                prop_assert_eq!(stats.objects, model.len() as u64);
                prop_assert_eq!(stats.names, names.len() as u64);
            }
        }
    }
}
