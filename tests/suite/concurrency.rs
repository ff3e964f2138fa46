//! Many threads saving and reading through one `&Stash` at once, and reads that see
//! writes before the writer commits them.

use std::sync::mpsc;
use std::thread;

use crate::common::{LAYOUTS, MODES, TestResult, objects};
use objstash::{Key, Stash};

#[test]
fn threads_save_and_read_at_once() -> TestResult {
    for layout in LAYOUTS {
        for mode in MODES {
            let dir = tempfile::tempdir()?;
            let stash = crate::common::open(dir.path(), layout, mode)?;
            let all = objects(21, 4_000);
            thread::scope(|s| -> TestResult {
                let mut handles = Vec::new();
                for part in all.chunks(1_000) {
                    let stash = &stash;
                    handles.push(s.spawn(move || -> anyhow::Result<()> {
                        for (i, obj) in part.iter().enumerate() {
                            let key = stash.save(obj)?;
                            // Read back something this thread saved a little earlier.
                            let earlier = &part[i / 2];
                            assert_eq!(
                                stash.get(&Key::of(earlier))?.as_deref(),
                                Some(&earlier[..])
                            );
                            assert!(stash.contains(&key)?);
                        }
                        Ok(())
                    }));
                    handles.push(s.spawn(move || -> anyhow::Result<()> {
                        // Readers racing the writers: whatever they see must be right.
                        for obj in part.iter().rev().step_by(3) {
                            if let Some(bytes) = stash.get(&Key::of(obj))? {
                                assert_eq!(&bytes, obj);
                            }
                            stash.missing(&[Key::of(obj)])?;
                        }
                        Ok(())
                    }));
                }
                for h in handles {
                    h.join().expect("no thread panics")?;
                }
                Ok(())
            })?;
            assert_eq!(stash.len()?, 4_000, "{layout} {mode}");
            assert!(stash.verify()?.is_ok());
        }
    }
    Ok(())
}

#[test]
fn other_threads_read_writes_before_commit() -> TestResult {
    let dir = tempfile::tempdir()?;
    // A large batch and no flush: rows stay pending while the readers look.
    let stash = Stash::builder().batch_size(1_000_000).open(dir.path().join("p.db"))?;
    let objs = objects(22, 2_000);
    let (tx, rx) = mpsc::channel::<Key>();
    thread::scope(|s| -> TestResult {
        let reader = s.spawn(|| -> anyhow::Result<usize> {
            let mut seen = 0;
            for key in rx {
                let bytes = stash.get(&key)?.expect("a saved key reads back at once");
                assert_eq!(Key::of(&bytes), key);
                assert!(stash.contains(&key)?);
                assert!(stash.missing(&[key])?.is_empty());
                assert_eq!(stash.get_many(&[key])?[0].as_ref(), Some(&bytes));
                seen += 1;
            }
            Ok(seen)
        });
        for obj in &objs {
            tx.send(stash.save(obj)?)?;
        }
        drop(tx);
        assert_eq!(reader.join().expect("reader does not panic")?, 2_000);
        Ok(())
    })?;
    Ok(())
}

#[test]
fn save_all_from_several_threads_with_overlap() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stash = Stash::builder().threads(3).channel_capacity(16).open(dir.path().join("o.db"))?;
    let objs = objects(23, 3_000);
    thread::scope(|s| {
        for start in [0, 500, 1_000, 1_500] {
            let stash = &stash;
            let slice = &objs[start..start + 1_500];
            s.spawn(move || {
                let keys = stash.save_all(slice).expect("save_all");
                for (k, o) in keys.iter().zip(slice) {
                    assert_eq!(*k, Key::of(o));
                }
            });
        }
    });
    assert_eq!(stash.len()?, 3_000);
    assert_eq!(stash.stats()?.raw_bytes, objs.iter().map(|o| o.len() as u64).sum::<u64>());
    Ok(())
}
