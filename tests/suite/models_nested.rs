//! Models that list other models' roots (a Speckle project whose versions share a
//! sub-model, a build that lists another build). A root listed by a model is one of its
//! members like any other: while the listed model is incomplete its root reads as absent,
//! so the model that lists it is incomplete too, and whole again when it is.

use crate::common::{TestResult, objects};
use objstash::{Key, Stash};

/// Reads `keys` in one snapshot: `Some` only if every one of them reads.
fn all_read(stash: &Stash, keys: &[Key]) -> Vec<bool> {
    stash.get_many(keys).expect("reads").iter().map(Option::is_some).collect()
}

/// The keys `read_model` returns for `root`, sorted; `None` if it answers none.
fn model_keys(stash: &Stash, root: &Key) -> Option<Vec<Key>> {
    let read = stash.read_model(root).expect("reads the model")?;
    for (key, bytes) in &read {
        assert_eq!(*key, Key::of(bytes), "read_model returns each object under its key");
    }
    let mut keys: Vec<Key> = read.into_iter().map(|(k, _)| k).collect();
    keys.sort();
    Some(keys)
}

fn sorted(mut keys: Vec<Key>) -> Vec<Key> {
    keys.sort();
    keys
}

/// How model A loses a member.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// `remove` of a member.
    Removed,
    /// A declared again with a member that was never saved.
    NeverSaved,
}

#[test]
fn a_model_listing_a_root_that_loses_a_member_is_incomplete_until_it_is_whole() -> TestResult {
    for loss in [Loss::Removed, Loss::NeverSaved] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("nested.db");
        let stash = Stash::open(&path)?;
        let objs = objects(71, 4);
        let (y, a1, x) = (&objs[0], &objs[1], &objs[2]);
        let (ky, ka1, kx) = (stash.save(y)?, stash.save(a1)?, stash.save(x)?);
        let a_members = vec![ky, ka1];
        let ra = stash.save(b"{\"root\":\"A\"}")?;
        assert!(stash.declare_model(&ra, &a_members)?.complete());
        let rb = stash.save(b"{\"root\":\"B\"}")?;
        assert!(stash.declare_model(&rb, &[ra, kx])?.complete());
        assert_eq!(model_keys(&stash, &rb), Some(sorted(vec![rb, ra, kx])));

        let never = Key::of(b"a member that was never saved");
        match loss {
            Loss::Removed => assert!(stash.remove(&ky)?),
            Loss::NeverSaved => {
                assert!(!stash.declare_model(&ra, &[ky, ka1, never])?.complete());
            }
        }
        stash.flush()?;
        assert_eq!(all_read(&stash, &[rb, ra, kx]), [false, false, true], "{loss:?}");
        let b = stash.model(&rb)?.expect("B is declared");
        assert!(!b.complete(), "{loss:?}: B lists A's root, which reads as absent: {b}");
        assert_eq!(model_keys(&stash, &rb), None, "{loss:?}");
        // A new object may take the rowid A's root had: it is no member of B.
        let z = stash.save(b"an unrelated object saved afterwards")?;
        stash.flush()?;
        assert_eq!(model_keys(&stash, &rb), None, "{loss:?}");
        let report = stash.verify()?;
        assert!(report.is_ok(), "{loss:?}: {report}");
        stash.close()?;

        let stash = Stash::open(&path)?;
        assert_eq!(all_read(&stash, &[rb, ra]), [false, false], "{loss:?}, reopened");
        match loss {
            Loss::Removed => {
                stash.save(y)?;
            }
            Loss::NeverSaved => {
                stash.save(b"a member that was never saved")?;
            }
        }
        stash.flush()?;
        assert_eq!(all_read(&stash, &[rb, ra, kx]), [true, true, true], "{loss:?}");
        assert!(stash.model(&rb)?.expect("declared").complete(), "{loss:?}");
        assert_eq!(model_keys(&stash, &rb), Some(sorted(vec![rb, ra, kx])), "{loss:?}");
        let mut a_all = a_members.clone();
        a_all.push(ra);
        if let Loss::NeverSaved = loss {
            a_all.push(never);
        }
        assert_eq!(model_keys(&stash, &ra), Some(sorted(a_all)), "{loss:?}");
        assert!(!model_keys(&stash, &rb).unwrap_or_default().contains(&z));
        stash.close()?;
    }
    Ok(())
}

#[test]
fn models_that_list_each_other_lose_and_regain_a_member_together() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("cycle.db"))?;
    let objs = objects(72, 2);
    let (ky, kx) = (stash.save(&objs[0])?, stash.save(&objs[1])?);
    let ra = stash.save(b"{\"root\":\"A\"}")?;
    let rb = stash.save(b"{\"root\":\"B\"}")?;
    // A lists B's root before B is a model, then B lists A's root: a cycle.
    assert!(stash.declare_model(&ra, &[ky, rb])?.complete());
    assert!(stash.declare_model(&rb, &[kx, ra])?.complete());
    assert!(stash.remove(&ky)?);
    stash.flush()?;
    assert_eq!(all_read(&stash, &[ra, rb, kx]), [false, false, true]);
    assert!(!stash.model(&ra)?.expect("A").complete());
    assert!(!stash.model(&rb)?.expect("B").complete());
    stash.save(&objs[0])?;
    stash.flush()?;
    assert_eq!(all_read(&stash, &[ra, rb, kx, ky]), [true; 4]);
    assert_eq!(model_keys(&stash, &ra), Some(sorted(vec![ra, rb, ky])));
    assert_eq!(model_keys(&stash, &rb), Some(sorted(vec![rb, ra, kx])));
    stash.close()?;
    Ok(())
}

#[test]
fn a_model_whose_root_another_model_lists_is_evicted_after_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder()
        .eviction_grace(std::time::Duration::ZERO)
        .open(dir.path().join("evict.db"))?;
    let mut sizes = Vec::new();
    let mut roots = Vec::new();
    let mut listed: Vec<Vec<Key>> = Vec::new();
    // A, then B listing A's root, then C: the newest, which a trim keeps.
    for (seed, name) in [(73, "A"), (74, "B"), (75, "C")] {
        let mut keys = stash.save_all(&objects(seed, 1_000))?;
        if name == "B" {
            keys.push(roots[0]);
        }
        let root = stash.save(format!("{{\"root\":\"{name}\"}}").as_bytes())?;
        assert!(stash.declare_model(&root, &keys)?.complete());
        stash.flush()?;
        sizes.push(stash.stats()?.file_bytes);
        roots.push(root);
        listed.push(keys);
    }
    // A is the oldest, but B lists its root: B holds A, and goes first.
    stash.trim_to(sizes[2] - (sizes[2] - sizes[1]) / 2)?;
    assert_eq!(all_read(&stash, &roots), [true, false, true]);
    assert_eq!(stash.read_model(&roots[0])?.map(|objects| objects.len()), Some(1_001));
    // Read just now, A is the newest; C, the oldest, goes next.
    stash.trim_to(sizes[0] / 2)?;
    assert_eq!(all_read(&stash, &roots), [true, false, false]);
    for (root, keys) in roots.iter().zip(&listed) {
        let mut all = vec![*root];
        all.extend(keys.iter().copied());
        let read = all_read(&stash, &all);
        assert!(!read[0] || read.iter().all(|r| *r), "root {root}: {read:?}");
    }
    stash.close()?;
    Ok(())
}
