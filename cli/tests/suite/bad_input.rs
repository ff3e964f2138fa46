//! The edges of the file system, met as a user meets them: a disk that fills up and a
//! stash that may not be written. Each test mounts a tmpfs, so each needs root: they are
//! ignored for everyone else and `.ci/run` runs them as root (`--ignored bad_input::`, with the library's).

use speckle_gen::noise;

use crate::common::*;
use crate::tmpfs::Tmpfs;

const NEEDS_ROOT: &str = "mounting a tmpfs (needs root: run as root)";

/// `put` printed the key of an object a full disk kept out of the stash: the key sat in
/// stdout's buffer when the writer failed and was written as the error path dropped it,
/// so `K=$(objstash put f)` got a key that `has` then called missing. A key is printed
/// only once its object is stored.
#[test]
#[ignore = "mounts a tmpfs: needs root; .ci/run runs it with --ignored as root"]
fn put_prints_no_key_for_an_object_a_full_disk_kept_out() -> TestResult {
    let fs = Tmpfs::mount("2m").expect(NEEDS_ROOT);
    let env = Env::with_db(fs.path().join("p.db"));
    let small = env.file("small.json", br#"{"speckle_type":"Base","id":1}"#);
    let out = env.run(&["put", s(&small)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), key_of(br#"{"speckle_type":"Base","id":1}"#));

    let big = noise(3, 3 << 20);
    let file = env.file("rnd3m.bin", &big);
    let out = env.run(&["put", s(&file)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("full"), "the error says why: {}", stderr(&out));
    assert_eq!(stdout(&out), "", "no key for an object that was not stored");
    let has = env.run(&["has", &key_of(&big)]);
    assert_eq!(has.status.code(), Some(1), "{}", stdout(&has));

    // With --json the same: nothing claims the object was stored.
    let out = env.run(&["put", "--json", s(&file)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!stdout(&out).contains(&key_of(&big)), "{}", stdout(&out));
    Ok(())
}
