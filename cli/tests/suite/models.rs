//! Models from the command line: put from files, listed, shown (exit 1 unless complete),
//! declared, pinned, exported whole, removed; a member removed makes its root absent.

use crate::common::{Env, TestResult, key_of, s, stderr, stdout};

#[test]
fn a_model_put_from_files_is_listed_shown_exported_and_removed() -> TestResult {
    let env = Env::new();
    let members: Vec<Vec<u8>> = (0..20).map(|i| format!("{{\"part\":{i}}}").into_bytes()).collect();
    let paths: Vec<_> =
        members.iter().enumerate().map(|(i, m)| env.file(&format!("parts/{i}.json"), m)).collect();
    let root = br#"{"root":"v1"}"#;
    let root_path = env.file("root.json", root);
    let mut args = vec!["model", "put", s(&root_path)];
    args.extend(paths.iter().map(|p| s(p)));
    args.extend(["--name", "version 1"]);
    let put = env.run(&args);
    assert!(put.status.success(), "{}", stderr(&put));
    let root_key = key_of(root);
    assert_eq!(stdout(&put).trim(), root_key, "the root's key, once committed");

    let listed = env.run(&["models"]);
    assert!(listed.status.success());
    let line = stdout(&listed);
    assert!(line.contains(&root_key) && line.contains("version 1"), "{line}");
    assert!(line.contains("21 objects") && line.contains("complete"), "{line}");
    let json = env.run(&["--json", "models"]);
    let model: serde_json::Value = serde_json::from_str(stdout(&json).trim())?;
    assert_eq!(model["root"], root_key.as_str());
    assert_eq!((model["objects"].as_u64(), model["complete"].as_bool()), (Some(21), Some(true)));
    assert!(model["stored_bytes"].as_u64().is_some_and(|b| b > 0));
    assert!(env.run(&["model", "show", &root_key]).status.success());

    let dir = env.root.join("export");
    let export = env.run(&["model", "export", &root_key, s(&dir)]);
    assert!(export.status.success(), "{}", stderr(&export));
    for object in members.iter().chain([&root.to_vec()]) {
        let key = key_of(object);
        assert_eq!(&std::fs::read(dir.join(&key[..2]).join(&key[2..]))?, object);
    }

    // A member removed: the root reads as absent, show exits 1, export refuses.
    let rm = env.run(&["rm", &key_of(&members[4])]);
    assert!(rm.status.success(), "{}", stderr(&rm));
    let get = env.run(&["get", &root_key]);
    assert!(!get.status.success(), "the root of an incomplete model reads as absent");
    let show = env.run(&["model", "show", &root_key]);
    assert_eq!(show.status.code(), Some(1));
    assert!(stdout(&show).contains("1 missing"), "{}", stdout(&show));
    assert_eq!(env.run(&["model", "export", &root_key, s(&dir)]).status.code(), Some(1));
    // Back, and then removed whole.
    assert!(env.run(&["put", s(&paths[4])]).status.success());
    assert!(env.run(&["get", &root_key]).status.success());
    assert!(env.run(&["model", "rm", &root_key]).status.success());
    assert_eq!(env.run(&["model", "rm", &root_key]).status.code(), Some(1));
    assert!(!env.run(&["has", &key_of(&members[0])]).status.success());
    assert!(stdout(&env.run(&["models"])).is_empty());
    Ok(())
}

#[test]
fn a_model_declared_from_keys_on_stdin_and_pinned_against_a_trim() -> TestResult {
    let env = Env::new();
    let members: Vec<Vec<u8>> = (0..10).map(|i| format!("member {i}").into_bytes()).collect();
    let paths: Vec<_> =
        members.iter().enumerate().map(|(i, m)| env.file(&format!("{i}.txt"), m)).collect();
    let mut put = vec!["put"];
    put.extend(paths.iter().map(|p| s(p)));
    assert!(env.run(&put).status.success());
    let root = env.file("root.txt", b"the root");
    assert!(env.run(&["put", s(&root)]).status.success());
    let keys: String = members.iter().map(|m| key_of(m) + "\n").collect();
    let root_key = key_of(b"the root");
    let declared = env.run_with_stdin(&["model", "declare", &root_key, "-"], keys.as_bytes());
    assert!(declared.status.success(), "{}", stderr(&declared));
    assert!(stdout(&declared).contains("11 objects"), "{}", stdout(&declared));
    // Declared with an object not stored: exit 1, and the root reads as absent.
    let other = env.file("other.txt", b"another root");
    assert!(env.run(&["put", s(&other)]).status.success());
    let absent = key_of(b"never stored");
    let short = env.run(&["model", "declare", &key_of(b"another root"), &absent]);
    assert_eq!(short.status.code(), Some(1));
    assert!(!env.run(&["get", &key_of(b"another root")]).status.success());

    assert!(env.run(&["model", "pin", &root_key]).status.success());
    let trim = env.run(&["trim", "--max-size", "1"]);
    assert!(trim.status.success(), "{}", stderr(&trim));
    assert!(env.run(&["get", &root_key]).status.success(), "pinned: kept whole");
    // A cap the pinned model alone exceeds: the warning counts the model's objects (#76,
    // 10: it said "0 of its 12 objects are pinned").
    let capped = env.run(&["config", "max-size", "1"]);
    assert!(capped.status.success(), "{}", stderr(&capped));
    assert!(stderr(&capped).contains("1 pinned models of 11 objects"), "{}", stderr(&capped));
    assert!(env.run(&["config", "max-size", "none"]).status.success());
    assert!(env.run(&["model", "unpin", &root_key]).status.success());
    assert_eq!(env.run(&["model", "pin", &absent]).status.code(), Some(1));
    // Bad keys are usage errors before anything opens.
    let bad = env.run(&["model", "show", "nope"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    Ok(())
}

/// The story (#76, 10): `model put R R R` of a root that was already a named model of 41
/// objects silently replaced it with an unnamed model of one. A put that would change an
/// existing model (its members or its name) refuses and says what it would replace;
/// `--replace` does it and says what it replaced; the same model put again is no change.
#[test]
fn a_model_put_over_another_model_of_its_root_refuses_unless_told_to_replace() -> TestResult {
    let env = Env::new();
    let root = env.file("root.json", br#"{"speckle_type":"Base","id":"root"}"#);
    let members: Vec<_> = (0..40)
        .map(|i| env.file(&format!("m{i}.json"), format!("{{\"member\":{i}}}").as_bytes()))
        .collect();
    let mut args = vec!["model", "put", s(&root), "--name", "v1"];
    args.extend(members.iter().map(|m| s(m)));
    let out = env.run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let key = key_of(br#"{"speckle_type":"Base","id":"root"}"#);
    // The same model again: no change, no refusal.
    let out = env.run(&args);
    assert!(out.status.success(), "the same model again: {}", stderr(&out));

    let out = env.run(&["model", "put", s(&root), s(&root), s(&root)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("41 objects") && text.contains("v1") && text.contains("--replace"),
        "{text}"
    );
    let shown = env.run(&["model", "show", &key]);
    assert!(
        stdout(&shown).contains("41") || stderr(&shown).contains("41"),
        "the model is as it was"
    );

    let out = env.run(&["model", "put", "--replace", s(&root), s(&root)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("replaced"), "it says what it replaced: {}", stderr(&out));
    Ok(())
}
