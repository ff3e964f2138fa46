//! Models: a root and the objects it lists, kept and evicted together. The invariant every
//! test checks (`model_is_whole_or_absent`): whenever a root can be read, every object its
//! model lists can be read, in the same snapshot; otherwise the root reads as absent.
//!
//! Before models, a capped stash evicted single objects by last use: a Speckle client that
//! trusts a cached root to mean a cached model got `root cached: True, children cached:
//! 170 / 2828` and deserialized a partial model.

use std::time::Duration;

use crate::common::{TestResult, objects};
use objstash::{Key, Stash, Values};

/// A model of `n` objects of seed `seed`: its members, and a root that lists them.
fn model(seed: u64, n: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let members = objects(seed, n);
    let ids: Vec<String> = members.iter().map(|m| Key::of(m).to_string()).collect();
    let root = format!("{{\"root\":{seed},\"__closure\":{:?}}}", ids).into_bytes();
    (root, members)
}

/// Checks the invariant for the model of `root` listing `members`: either the root reads
/// as absent, or the root and every member read back, byte for byte. Whether it was whole.
fn model_is_whole_or_absent(stash: &Stash, root: &[u8], members: &[Vec<u8>]) -> bool {
    let root_key = Key::of(root);
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    // One read of many keys is one snapshot: the root first, then its members.
    let all: Vec<Key> = std::iter::once(root_key).chain(keys.iter().copied()).collect();
    let read = stash.get_many(&all).expect("reads");
    match &read[0] {
        None => false,
        Some(bytes) => {
            assert_eq!(bytes, root, "the root's bytes");
            for (got, member) in read[1..].iter().zip(members) {
                assert_eq!(got.as_deref(), Some(&member[..]), "a member of a readable root");
            }
            true
        }
    }
}

#[test]
fn a_saved_model_reads_back_whole_in_storage_order_and_lists_itself() -> TestResult {
    for values in [Values::InRows, Values::InFile] {
        let dir = tempfile::tempdir()?;
        let stash = Stash::builder().values(values).open(dir.path().join("m.db"))?;
        let loose = stash.save(b"a loose object")?;
        let (root, members) = model(1, 500);
        let saved = stash.save_model(&root, &members)?;
        assert!(saved.complete(), "{saved}");
        assert_eq!((saved.objects, saved.missing), (501, 0));
        assert!(model_is_whole_or_absent(&stash, &root, &members));
        let read = stash.read_model(&Key::of(&root))?.expect("a complete model");
        assert_eq!(read.len(), 501);
        let keys: Vec<Key> = read.iter().map(|(k, _)| *k).collect();
        for (key, bytes) in &read {
            assert_eq!(*key, Key::of(bytes));
        }
        let mut expected: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
        expected.push(Key::of(&root));
        let (mut got, mut want) = (keys.clone(), expected);
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert!(stash.read_model(&loose)?.is_none(), "a loose object is no model");
        let listed = stash.models()?;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].root, Key::of(&root));
        assert!(listed[0].stored_bytes > 0);
        assert_eq!(stash.model(&Key::of(&root))?, Some(listed[0].clone()));
        stash.close()?;
        // The model outlives the handle.
        let stash = Stash::open(dir.path().join("m.db"))?;
        assert!(stash.model(&Key::of(&root))?.is_some_and(|m| m.complete()));
        assert!(model_is_whole_or_absent(&stash, &root, &members));
    }
    Ok(())
}

#[test]
fn a_removed_member_makes_the_root_absent_until_it_is_saved_again() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("m.db"))?;
    let (root, members) = model(2, 200);
    stash.save_model(&root, &members)?;
    let root_key = Key::of(&root);
    assert!(stash.remove(&Key::of(&members[17]))?);
    assert_eq!(stash.get(&root_key)?, None, "the root of an incomplete model is absent");
    assert!(!stash.contains(&root_key)?);
    assert_eq!(stash.missing(&[root_key])?, vec![root_key]);
    assert!(!model_is_whole_or_absent(&stash, &root, &members));
    let listed = stash.model(&root_key)?.expect("still declared");
    assert_eq!(listed.missing, 1);
    assert!(stash.read_model(&root_key)?.is_none());
    // Saving the root again does not bring it back: its model still lacks a member.
    stash.save(&root)?;
    stash.flush()?;
    assert_eq!(stash.get(&root_key)?, None);
    // The member back: the model is whole again, and so is its root.
    stash.save(&members[17])?;
    stash.flush()?;
    assert!(model_is_whole_or_absent(&stash, &root, &members));
    assert!(stash.model(&root_key)?.expect("declared").complete());
    stash.close()?;
    Ok(())
}

#[test]
fn a_declared_model_lacking_members_is_absent_until_they_come() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::open(dir.path().join("m.db"))?;
    let (root, members) = model(3, 50);
    let root_key = stash.save(&root)?;
    stash.save_all(&members[..40])?;
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    let declared = stash.declare_named_model("model-3", &root_key, &keys)?;
    assert_eq!((declared.objects, declared.missing), (51, 10));
    assert_eq!(declared.name.as_deref(), Some(&b"model-3"[..]));
    assert_eq!(stash.get(&root_key)?, None);
    stash.save_all(&members[40..])?;
    stash.flush()?;
    assert!(model_is_whole_or_absent(&stash, &root, &members));
    Ok(())
}

#[test]
fn an_assembly_holds_what_it_found_and_gives_it_up_when_dropped() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(dir.path().join("m.db"))?;
    let (root, members) = model(4, 100);
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    stash.save_all(&members[..60])?;
    // As a copy from a server does it: ask what is missing, save that, then the root.
    let assembly = stash.assemble()?;
    let missing = assembly.missing(&keys)?;
    assert_eq!(missing, keys[60..].to_vec());
    assembly.save_all(&members[60..])?;
    let root_key = assembly.save(&root)?;
    let finished = assembly.finish(&root_key, &keys)?;
    assert!(finished.complete(), "{finished}");
    assert!(model_is_whole_or_absent(&stash, &root, &members));
    // An assembly dropped unfinished lets what it held go: a trim can take it.
    let other = objects(5, 30);
    let assembly = stash.assemble()?;
    assembly.save_all(&other)?;
    drop(assembly);
    stash.flush()?;
    stash.evict_unused_since(Duration::ZERO)?;
    let left = stash.get_many(&other.iter().map(|o| Key::of(o)).collect::<Vec<_>>())?;
    assert!(left.iter().all(Option::is_none), "a given-up assembly's objects are loose");
    // The model is evicted whole too, once unused: never in part.
    assert!(stash.get(&root_key)?.is_none() || model_is_whole_or_absent(&stash, &root, &members));
    Ok(())
}

#[test]
fn a_capped_stash_evicts_whole_models_and_loose_objects_by_last_use() -> TestResult {
    for values in [Values::InRows, Values::InFile] {
        let dir = tempfile::tempdir()?;
        let cap = 6 << 20;
        let stash = Stash::builder()
            .values(values)
            .max_size(cap)
            .eviction_grace(Duration::ZERO)
            .open(dir.path().join("m.db"))?;
        let models: Vec<(Vec<u8>, Vec<Vec<u8>>)> = (10..22).map(|s| model(s, 1_500)).collect();
        let mut loose = Vec::new();
        for (i, (root, members)) in models.iter().enumerate() {
            stash.save_model(root, members)?;
            loose.extend(stash.save_all(&objects(100 + i as u64, 200))?);
            stash.flush()?;
            for (root, members) in &models[..=i] {
                model_is_whole_or_absent(&stash, root, members);
            }
        }
        stash.close()?;
        let stash = Stash::open(dir.path().join("m.db"))?;
        let whole = models.iter().filter(|(r, m)| model_is_whole_or_absent(&stash, r, m)).count();
        assert!(whole >= 1, "{values}: the newest model stays");
        assert!(whole < models.len(), "{values}: the cap evicted models");
        // The newest model is whole; the oldest went.
        let (root, members) = models.last().expect("models");
        assert!(model_is_whole_or_absent(&stash, root, members), "{values}");
        assert!(!model_is_whole_or_absent(&stash, &models[0].0, &models[0].1), "{values}");
        // Every declared model that is listed complete reads whole.
        for listed in stash.models()? {
            let (root, members) =
                models.iter().find(|(r, _)| Key::of(r) == listed.root).expect("ours");
            assert_eq!(listed.complete(), model_is_whole_or_absent(&stash, root, members));
        }
        let size = std::fs::metadata(dir.path().join("m.db"))?.len();
        assert!(size <= cap + cap / 20, "{values}: {size} bytes under a {cap}-byte cap");
    }
    Ok(())
}

#[test]
fn a_model_larger_than_the_cap_stays_whole_until_another_needs_the_room() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder()
        .max_size(2 << 20)
        .eviction_grace(Duration::ZERO)
        .open(dir.path().join("m.db"))?;
    let (big_root, big) = model(30, 6_000);
    stash.save_model(&big_root, &big)?;
    stash.flush()?;
    stash.trim_to(2 << 20)?;
    assert!(model_is_whole_or_absent(&stash, &big_root, &big), "kept whole over the cap");
    let (next_root, next) = model(31, 300);
    stash.save_model(&next_root, &next)?;
    stash.flush()?;
    stash.trim_to(2 << 20)?;
    assert!(!model_is_whole_or_absent(&stash, &big_root, &big), "evicted whole for the next");
    assert!(big.iter().all(|m| stash.get(&Key::of(m)).expect("reads").is_none()));
    assert!(model_is_whole_or_absent(&stash, &next_root, &next));
    Ok(())
}

#[test]
fn pinned_and_shared_models_keep_their_objects() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(dir.path().join("m.db"))?;
    let (a_root, a) = model(40, 300);
    let (pinned_root, pinned) = model(41, 300);
    // B shares half of A's objects.
    let mut b = a[..150].to_vec();
    b.extend(objects(42, 150));
    let b_root = b"{\"root\":\"b\"}".to_vec();
    stash.save_model(&a_root, &a)?;
    stash.save_model(&pinned_root, &pinned)?;
    assert!(stash.pin_model(&Key::of(&pinned_root))?);
    stash.save_model(&b_root, &b)?;
    stash.flush()?;
    // Everything that can go goes: A (its shared half stays for B); B, the newest, and the
    // pinned model stay.
    stash.trim_to(1)?;
    assert!(!model_is_whole_or_absent(&stash, &a_root, &a));
    assert!(model_is_whole_or_absent(&stash, &b_root, &b), "B keeps the objects it shares");
    assert!(model_is_whole_or_absent(&stash, &pinned_root, &pinned));
    assert!(stash.unpin_model(&Key::of(&pinned_root))?);
    assert!(stash.remove_model(&Key::of(&b_root))?);
    assert!(b.iter().all(|m| stash.get(&Key::of(m)).expect("reads").is_none()));
    assert!(!stash.remove_model(&Key::of(&b_root))?, "gone");
    assert!(stash.models()?.iter().all(|m| m.root != Key::of(&b_root)));
    Ok(())
}

/// The story (#76, 5): `pin(root)` of a model's root pinned the row alone; a trim evicted
/// the model around it, so the pinned root went with its model while the pins of loose
/// members kept them. A root is readable only with its whole model, so pinning it keeps the
/// model: a model whose root is pinned is not evicted, and unpinned it goes as any other.
#[test]
fn a_pinned_root_keeps_its_model() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(dir.path().join("m.db"))?;
    let (kept_root, kept) = model(45, 300);
    let (other_root, other) = model(46, 300);
    let (newest_root, newest) = model(47, 10);
    stash.save_model(&kept_root, &kept)?;
    stash.save_model(&other_root, &other)?;
    stash.save_model(&newest_root, &newest)?;
    assert_eq!(stash.pin(&[Key::of(&kept_root)])?, [true]);
    stash.flush()?;
    stash.trim_to(1)?;
    assert!(stash.get(&Key::of(&kept_root))?.is_some(), "the pinned root reads");
    let keys: Vec<Key> = kept.iter().map(|m| Key::of(m)).collect();
    assert_eq!(stash.missing(&keys)?, Vec::<Key>::new(), "with every object of its model");
    assert_eq!(stash.read_model(&Key::of(&kept_root))?.map(|m| m.len()), Some(301));
    assert!(stash.get(&Key::of(&other_root))?.is_none(), "the other model went");
    assert!(!model_is_whole_or_absent(&stash, &other_root, &other));
    // Unpinned, the model goes as any other (an unpin is a use: a newer model is saved, as
    // the trim keeps the most recently used one).
    assert_eq!(stash.unpin(&[Key::of(&kept_root)])?, [true]);
    let (later_root, later) = model(48, 10);
    stash.save_model(&later_root, &later)?;
    stash.flush()?;
    stash.trim_to(1)?;
    assert!(stash.get(&Key::of(&kept_root))?.is_none(), "unpinned, it went");
    assert!(stash.missing(&keys)?.len() == keys.len() || stash.missing(&keys)?.is_empty());
    Ok(())
}

/// The story (#76, 6): a model made incomplete (a member removed) keeps its root's row
/// aside, so that every read reports the root absent. verify took that for damage ("1 names
/// point to no stored object"; for a chunked root, dozens of chunk-reference problems) and
/// repair then dropped the name, and for a root over 8 MiB the root itself, while saying
/// that nothing was lost. An incomplete model is not damage: verify is sound, repair keeps
/// the root, its name and its chunks, and the root reads again once its member is back.
#[test]
fn verify_and_repair_keep_the_root_an_incomplete_model_holds_aside() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("m.db");
    let (root, members) = model(60, 50);
    let big_root = crate::common::noise(61, 9 << 20);
    let big_members = objects(62, 20);
    {
        let stash = Stash::open(&path)?;
        let keys = stash.save_all(&members)?;
        let big_keys = stash.save_all(&big_members)?;
        stash.save_named(&[("the root", &root[..]), ("the big root", &big_root[..])])?;
        stash.declare_model(&Key::of(&root), &keys)?;
        stash.declare_model(&Key::of(&big_root), &big_keys)?;
        assert!(stash.remove(&keys[0])?);
        assert!(stash.remove(&big_keys[0])?);
        assert!(stash.get(&Key::of(&root))?.is_none(), "an incomplete model's root reads absent");
        assert!(stash.get(&Key::of(&big_root))?.is_none());
        stash.save(b"a loose object, damaged below")?;
        let report = stash.verify()?;
        assert!(
            report.is_ok() && report.problems.is_empty(),
            "an incomplete model is no damage: {report}"
        );
        stash.close()?;
    }
    let recovery = objstash::repair(&path)?;
    assert_eq!(recovery.dropped, 0, "nothing to repair: {recovery}");
    // Damage elsewhere: a salvage carries the roots kept aside with their names and chunks.
    {
        let conn = rusqlite::Connection::open(&path)?;
        let sql = "UPDATE objects SET data = x'deadbeef' WHERE key = ?1";
        let key = Key::of(b"a loose object, damaged below");
        assert_eq!(conn.execute(sql, [&key.as_bytes()[..]])?, 1);
    }
    let recovery = objstash::repair(&path)?;
    assert_eq!(recovery.dropped, 1, "the damaged object alone: {recovery}");
    let stash = Stash::open(&path)?;
    assert_eq!(
        stash.resolve(&["the root", "the big root"])?,
        [Some(Key::of(&root)), Some(Key::of(&big_root))]
    );
    stash.save_all(&[&members[0], &big_members[0]])?;
    stash.flush()?;
    assert_eq!(stash.get_named(&["the root"])?[0].as_deref(), Some(&root[..]), "the root is back");
    assert_eq!(stash.get(&Key::of(&big_root))?.as_deref(), Some(&big_root[..]), "the big root too");
    assert!(stash.verify()?.is_ok());
    Ok(())
}

#[test]
fn a_repaired_stash_keeps_its_models_and_a_model_that_lost_an_object_is_absent() -> TestResult {
    for layout in crate::common::LAYOUTS {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("m.db");
        let (whole_root, whole) = model(50, 300);
        let (hurt_root, hurt) = model(51, 300);
        let (short_root, short) = model(52, 300);
        let loose = b"a loose object".to_vec();
        {
            let stash = Stash::builder().layout(layout).open(&path)?;
            let assembly = stash.assemble()?;
            let keys = assembly.save_all(&whole)?;
            let root = assembly.save(&whole_root)?;
            assembly.finish_named("whole", &root, &keys)?;
            stash.save_model(&hurt_root, &hurt)?;
            // A model already short of an object: its root is kept apart.
            stash.save_model(&short_root, &short)?;
            assert!(stash.remove(&Key::of(&short[3]))?);
            stash.save(&loose)?;
            stash.close()?;
        }
        {
            // Garbage where one object of the second model and the loose object were.
            let conn = rusqlite::Connection::open(&path)?;
            for bytes in [&hurt[7], &loose] {
                let key = Key::of(bytes);
                let table = match layout {
                    objstash::Layout::Single => "objects".to_string(),
                    _ => format!("objects_{:02x}", key.as_bytes()[0]),
                };
                let sql = format!("UPDATE {table} SET data = x'deadbeef' WHERE key = ?1");
                assert_eq!(conn.execute(&sql, [&key.as_bytes()[..]])?, 1);
            }
        }
        let report = objstash::repair(&path)?;
        assert_eq!(report.dropped, 2, "{layout}: {report}");
        let stash = Stash::builder().layout(layout).open(&path)?;
        let whole_key = Key::of(&whole_root);
        let kept = stash.model(&whole_key)?.expect("carried");
        assert!(kept.complete(), "{layout}: {kept}");
        assert_eq!((kept.objects, kept.name.as_deref()), (301, Some(&b"whole"[..])));
        assert!(model_is_whole_or_absent(&stash, &whole_root, &whole));
        assert_eq!(stash.read_model(&whole_key)?.map(|m| m.len()), Some(301));
        // The model that lost an object, and the one already short of one: roots absent.
        for (root, members, lacking) in [(&hurt_root, &hurt, 7), (&short_root, &short, 3)] {
            let listed = stash.model(&Key::of(root))?.expect("carried");
            assert_eq!((listed.objects, listed.missing), (301, 1), "{layout}: {listed}");
            assert!(!model_is_whole_or_absent(&stash, root, members));
            // The object saved again brings the root back: its bytes were kept.
            stash.save(&members[lacking])?;
            stash.flush()?;
            assert!(
                model_is_whole_or_absent(&stash, root, members),
                "{layout}: {:?} {:?}",
                stash.model(&Key::of(root))?,
                stash.get(&Key::of(&members[lacking]))?.is_some()
            );
        }
        assert!(stash.verify()?.is_ok());
    }
    Ok(())
}

#[test]
fn a_detached_assembly_resumes_and_one_given_up_meanwhile_holds_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("m.db");
    let stash = Stash::builder().eviction_grace(Duration::ZERO).open(&path)?;
    let (root, members) = model(60, 100);
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    let names: Vec<String> = (0..100).map(|i| format!("member-{i}")).collect();
    let named: Vec<(&String, &Vec<u8>)> = names.iter().zip(&members).collect();
    stash.save_named(&named[..40])?;
    let id = stash.assemble()?.detach();
    {
        let assembly = stash.resume_assembly(id);
        let held = assembly.hold_named(&names)?;
        assert_eq!(held[..40], keys[..40].iter().map(|k| Some(*k)).collect::<Vec<_>>()[..]);
        assert!(held[40..].iter().all(Option::is_none));
        let _ = assembly.detach();
    }
    // Held: not evicted.
    stash.evict_unused_since(Duration::ZERO)?;
    assert!(stash.missing(&keys[..40])?.is_empty(), "held by the assembly");
    let assembly = stash.resume_assembly(id);
    assembly.save_named(&named[40..])?;
    let root_key = assembly.save(&root)?;
    assert!(assembly.finish(&root_key, &keys)?.complete());
    assert!(model_is_whole_or_absent(&stash, &root, &members));
    let (first_root, first_members) = (root, members);

    // An assembly given up, then used again: its saves are loose, its holds find nothing,
    // and its finish declares the model afresh.
    let (root, members) = model(61, 50);
    let keys: Vec<Key> = members.iter().map(|m| Key::of(m)).collect();
    let id = stash.assemble()?.detach();
    stash.resume_assembly(id).give_up();
    let stale = stash.resume_assembly(id);
    stale.save_all(&members[..10])?;
    assert_eq!(stale.hold(&keys[..10])?, vec![false; 10]);
    let _ = stale.detach();
    stash.flush()?;
    stash.evict_unused_since(Duration::ZERO)?;
    assert_eq!(stash.missing(&keys[..10])?.len(), 10, "saved loose, evicted as loose");
    let stale = stash.resume_assembly(id);
    stale.save_all(&members)?;
    let root_key = stale.save(&root)?;
    let declared = stale.finish(&root_key, &keys)?;
    assert!(declared.complete(), "{declared}");
    assert!(model_is_whole_or_absent(&stash, &root, &members));
    assert!(!model_is_whole_or_absent(&stash, &first_root, &first_members));
    // The first model, complete and unused, went whole with the loose objects.
    assert_eq!(stash.models()?.iter().map(|m| m.root).collect::<Vec<_>>(), vec![root_key]);
    Ok(())
}
