//! The `objstash` binary, run as a user would: every command, bad keys, missing files,
//! an unwritable output and a pipe closed early.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use speckle_gen::noise;

use crate::common::*;

#[test]
fn put_get_has_rm() -> TestResult {
    let env = Env::new();
    let a = env.file("a.json", br#"{"a":1}"#);
    let b = env.file("b.json", br#"{"b":2}"#);
    let out = env.run(&["put", s(&a), s(&b)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{}\n{}\n", key_of(br#"{"a":1}"#), key_of(br#"{"b":2}"#)));

    let out = env.run_with_stdin(&["put"], b"from stdin");
    assert_eq!(stdout(&out).trim(), key_of(b"from stdin"));
    let out = env.run_with_stdin(&["put", "-"], b"dash");
    assert_eq!(stdout(&out).trim(), key_of(b"dash"));

    let out = env.run(&["get", &key_of(br#"{"a":1}"#)]);
    assert!(out.status.success());
    assert_eq!(out.stdout, br#"{"a":1}"#);
    let target = env.root.join("out.json");
    let out = env.run(&["get", &key_of(b"dash"), "-o", s(&target)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&target)?, b"dash");

    let absent = key_of(b"absent");
    let out = env.run(&["has", &key_of(b"dash"), &absent]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), format!("{} present\n{absent} missing\n", key_of(b"dash")));
    let out = env.run(&["has", "--json", &key_of(b"dash")]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).trim(),
        format!("[{{\"key\":\"{}\",\"present\":true}}]", key_of(b"dash"))
    );

    let out = env.run(&["rm", &key_of(b"dash")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["rm", &key_of(b"dash")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no object"), "{}", stderr(&out));
    let out = env.run(&["get", &key_of(b"dash")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no object"));
    Ok(())
}

#[test]
fn missing_reads_keys_from_stdin() -> TestResult {
    let env = Env::new();
    env.run_with_stdin(&["put"], b"here");
    let input = format!("{}\n{}\n\n", key_of(b"here"), key_of(b"not here"));
    let out = env.run_with_stdin(&["missing"], input.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{}\n", key_of(b"not here")));
    Ok(())
}

#[test]
fn import_export_ls_stats_verify() -> TestResult {
    let env = Env::new();
    let src = env.root.join("src");
    for i in 0..300u64 {
        env.file(&format!("src/d{}/o{i}.json", i % 7), &speckle_gen::object(5, i));
    }
    env.file("src/dup.json", &speckle_gen::object(5, 0));
    let out = env.run(&["import", s(&src)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("imported 301 files") && stdout(&out).contains("300 of them new"),
        "{}",
        stdout(&out)
    );

    let out = env.run(&["ls"]);
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 300);
    let first: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(first.len(), 3);
    assert_eq!(first[0].len(), 64);

    let out = env.run(&["ls", "--json"]);
    let text = stdout(&out);
    assert!(text.trim_start().starts_with('[') && text.trim_end().ends_with(']'));
    assert_eq!(text.matches("\"key\":").count(), 300);

    let out = env.run(&["stats", "--json"]);
    let text = stdout(&out);
    assert!(text.contains("\"objects\":300"), "{text}");
    let raw: u64 = (0..300).map(|i| speckle_gen::object(5, i).len() as u64).sum();
    assert!(text.contains(&format!("\"raw_bytes\":{raw}")), "{text}");
    let out = env.run(&["stats"]);
    assert!(stdout(&out).contains("compression ratio"));

    let out = env.run(&["verify"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("300 objects checked, 0 corrupt"));
    let out = env.run(&["verify", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        report,
        serde_json::json!({"checked": 300, "corrupt": [], "unreachable": [],
                           "damaged_rows_with_unreadable_keys": 0, "problems": [],
                           "recovery": null, "repair_would_keep": null,
                           "repair_would_lose": null})
    );

    let dump = env.root.join("dump");
    let out = env.run(&["export", s(&dump)]);
    assert!(out.status.success(), "{}", stderr(&out));
    for i in [0u64, 150, 299] {
        let obj = speckle_gen::object(5, i);
        let hex = key_of(&obj);
        assert_eq!(std::fs::read(dump.join(&hex[..2]).join(&hex[2..]))?, obj);
    }
    Ok(())
}

#[test]
fn verify_exits_1_on_corruption() -> TestResult {
    let env = Env::new();
    let key = stdout(&env.run_with_stdin(&["put"], b"to be damaged")).trim().to_string();
    let conn = rusqlite::Connection::open(&env.db)?;
    conn.execute("UPDATE objects SET data = x'1f8b0800000000000000ff'", [])?;
    drop(conn);
    let out = env.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains(&format!("corrupt {key}")), "{}", stdout(&out));
    let out = env.run(&["get", &key]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "corrupt bytes were written");
    assert!(stderr(&out).contains("corrupt"), "{}", stderr(&out));

    // repair drops the damaged row, keeps the file aside, and leaves a stash that verifies.
    let good = stdout(&env.run_with_stdin(&["put"], b"intact")).trim().to_string();
    let out = env.run(&["repair"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("kept 1 objects of the 2 it recorded: 1 objects are lost"), "{text}");
    assert!(text.contains("1 damaged rows dropped; the damaged file is kept"), "{text}");
    // Lost objects are news even with --quiet.
    assert!(stderr(&out).contains("1 objects are lost"), "{}", stderr(&out));
    assert!(env.run(&["verify"]).status.success());
    assert_eq!(env.run(&["get", &good]).stdout, b"intact");
    assert_eq!(env.run(&["has", &key]).status.code(), Some(1));
    Ok(())
}

/// The story: 64 KB of random bytes in the middle of a stash; `export` stopped at the first
/// unreadable page (10,240 of 19,497 objects written), `get` of a key the damage made
/// unreachable said "no object", and `verify` and `repair` counted differently. A damaged
/// stash is read as far as it can be: export writes what a repair keeps, verify says
/// what that is, and every key the damage hides reads as damaged, not absent.
#[test]
fn a_damaged_stash_is_read_as_far_as_it_can_be_and_every_report_agrees() -> TestResult {
    let env = Env::new();
    let objects = speckle_gen::objects(17, 0, 8_000);
    for (i, object) in objects.iter().enumerate() {
        env.file(&format!("src/{i}.json"), object);
    }
    assert!(env.run(&["import", s(&env.root.join("src"))]).status.success());
    let len = std::fs::metadata(&env.db)?.len();
    let mut file = std::fs::OpenOptions::new().write(true).open(&env.db)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(len / 2))?;
    file.write_all(&noise(7, 64 << 10))?;
    drop(file);
    let copy = env.root.join("copy.db");
    std::fs::copy(&env.db, &copy)?;

    let dump = env.root.join("dump");
    let out = env.run(&["export", s(&dump)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("verifies on its pages"), "{}", stderr(&out));
    let mut exported = 0;
    for dir in std::fs::read_dir(&dump)? {
        let dir = dir?;
        if !dir.file_type()?.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(dir.path())? {
            let f = f?;
            let name =
                format!("{}{}", dir.file_name().to_string_lossy(), f.file_name().to_string_lossy());
            assert_eq!(key_of(&std::fs::read(f.path())?), name, "an exported object's bytes");
            exported += 1;
        }
    }
    assert!(exported > 4_000 && exported < 8_000, "{exported} exported");
    let said = format!("repair` rebuilds it from the same {exported} objects");
    assert!(stderr(&out).contains(&said), "{}", stderr(&out));
    assert!(!dump.join(".objstash-rescue.db").exists(), "the rescued copy is removed");

    // Every key the export could not write reads as damaged, never as absent.
    let mut unread = 0;
    for object in &objects {
        let key = key_of(object);
        if dump.join(&key[..2]).join(&key[2..]).exists() {
            continue;
        }
        unread += 1;
        let out = env.run(&["get", &key]);
        assert_eq!(out.status.code(), Some(1), "{key}");
        assert!(stderr(&out).contains("the stash is damaged"), "{key}: {}", stderr(&out));
    }
    assert_eq!(unread, 8_000 - exported);

    let copy = Env::with_db(copy);
    let out = copy.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let said = format!("a repair would keep {exported} objects of the 8000 the stash records");
    assert!(stdout(&out).contains(&said), "{}", stdout(&out));
    let out = copy.run(&["repair"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = format!("kept {exported} objects of the 8000 it recorded");
    assert!(stdout(&out).contains(&said), "{}", stdout(&out));
    Ok(())
}

#[test]
fn bad_input_gets_clear_errors_and_exit_codes() -> TestResult {
    let env = Env::new();
    let out = env.run(&["get", "nothex"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("64 hex digits"), "{}", stderr(&out));
    let out = env.run(&["has", "abc"]);
    assert_eq!(out.status.code(), Some(2));

    let out = env.run(&["put", s(&env.root.join("no-such-file"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-file"), "{}", stderr(&out));

    env.run_with_stdin(&["put"], b"x");
    let out = env.run(&["get", &key_of(b"x"), "-o", "/proc/version/nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("writing /proc/version/nope"), "{}", stderr(&out));

    let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .arg("stats")
        .env_remove("OBJSTASH_DB")
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--db"), "{}", stderr(&out));

    let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .arg("stats")
        .env("OBJSTASH_DB", &env.db)
        .output()?;
    assert!(out.status.success(), "OBJSTASH_DB is honoured: {}", stderr(&out));

    let text =
        env.file("notes.txt", b"plain text, not a database, long enough to matter............");
    let out =
        Command::new(env!("CARGO_BIN_EXE_objstash")).args(["--db", s(&text), "stats"]).output()?;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a SQLite database"), "{}", stderr(&out));

    let out = env.run(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    Ok(())
}

#[test]
fn a_pipe_closed_early_is_not_a_panic() -> TestResult {
    let env = Env::new();
    let src = env.root.join("many");
    for i in 0..3_000u64 {
        env.file(&format!("many/{i}.json"), &speckle_gen::object(6, i));
    }
    assert!(env.run(&["import", s(&src)]).status.success());
    let mut child = env.cmd(&["ls"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 65];
    std::io::Read::read_exact(&mut stdout, &mut first)?;
    drop(stdout);
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "exit {:?}: {}", out.status, stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    Ok(())
}

#[test]
fn help_has_examples_on_every_command() -> TestResult {
    for cmd in [
        "put", "get", "has", "missing", "import", "export", "ls", "stats", "verify", "repair", "rm",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_objstash")).args([cmd, "--help"]).output()?;
        assert!(out.status.success());
        assert!(stdout(&out).contains("Example"), "{cmd} --help has no example");
    }
    Ok(())
}

#[test]
fn codec_zstd_dict_trains_and_reads_with_either_codec() -> TestResult {
    let env = Env::new();
    let src = env.root.join("src");
    // 6,000 objects of ~1.2 KB: past the 4 MiB sample, so a dictionary is trained.
    for i in 0..6_000u64 {
        env.file(&format!("src/o{i}.json"), &speckle_gen::object(8, i));
    }
    let out = env.run(&["--codec", "zstd-dict", "import", s(&src)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["stats", "--json"]);
    let text = stdout(&out);
    assert!(text.contains("\"objects\":6000") && text.contains("\"dictionaries\":1"), "{text}");
    // Read back with the default codec: the rows name their dictionary.
    let obj = speckle_gen::object(8, 5_999);
    let out = env.run(&["get", &key_of(&obj)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, obj);
    let out = env.run(&["verify"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.run(&["--codec", "brotli", "stats"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("gzip or zstd-dict"), "{}", stderr(&out));
    Ok(())
}

/// The story: a stash truncated to 3 MB of 8 MB was salvaged silently by the next command
/// of any kind (7,410 of 20,001 objects kept), `verify` then exited 0 with JSON that said
/// nothing happened, and with `-q` not a word was printed. A salvage that lost objects is
/// news: on stderr whatever `--quiet` says, and `verify` fails and reports it.
#[test]
fn a_salvage_that_lost_objects_is_news_even_when_quiet() -> TestResult {
    let env = Env::new();
    {
        let stash = objstash::Stash::open(&env.db)?;
        let objects: Vec<Vec<u8>> = (0..20_000).map(|i| speckle_gen::object(9, i)).collect();
        stash.save_all(&objects)?;
        stash.close()?;
    }
    let len = std::fs::metadata(&env.db)?.len();
    std::fs::OpenOptions::new().write(true).open(&env.db)?.set_len(len * 3 / 8)?;
    let out = env.run(&["-q", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // The totals were in the lost part of the file, so the loss is known only as possible.
    assert!(stderr(&out).contains("objects may be lost"), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let recovery = &report["recovery"];
    assert_eq!(recovery["lost_anything"], true, "{report}");
    let kept = recovery["recovered"].as_u64().expect("a count");
    assert!(kept > 1_000 && kept < 20_000, "{report}");
    assert_eq!(report["checked"], kept, "{report}");
    assert!(recovery["damaged_copy"].is_string(), "{report}");
    // The rebuilt stash is sound: the next check passes and says nothing more.
    let out = env.run(&["-q", "verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    Ok(())
}

/// The story: a mistyped `--db` for a reading command created the directories and an
/// empty stash and exited 0. Only `put` and `import` create a stash.
#[test]
fn reading_commands_do_not_create_a_stash() -> TestResult {
    let env = Env::new();
    let typo = env.root.join("typo").join("cache.db");
    let key = key_of(b"x");
    let dump = env.root.join("dump");
    for args in [
        vec!["stats"],
        vec!["verify"],
        vec!["get", &key],
        vec!["has", &key],
        vec!["ls"],
        vec!["missing"],
        vec!["export", s(&dump)],
        vec!["rm", &key],
        vec!["config"],
        vec!["config", "durability", "safe"],
        vec!["repair"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
            .arg("--db")
            .arg(&typo)
            .args(&args)
            .stdin(Stdio::null())
            .output()?;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("no stash at"), "{args:?}: {}", stderr(&out));
        assert!(!env.root.join("typo").exists(), "{args:?} created the directory");
    }
    let out = env.run(&["--layout", "bucketed", "stats"]);
    assert_eq!(out.status.code(), Some(2), "a flag the command ignores is an error");
    env.run_with_stdin(&["put"], b"x");
    let out = env.run(&["get", "--json", &key]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    Ok(())
}

/// The story: `repair` of a healthy stash said it "recovered a damaged stash ... before
/// the crash" and kept another full copy of the file on every run.
#[test]
fn repair_of_a_sound_stash_says_so_and_keeps_no_copy() -> TestResult {
    let env = Env::new();
    for i in 0..50u64 {
        env.run_with_stdin(&["put"], &speckle_gen::object(3, i));
    }
    let listing = |dir: &Path| -> std::io::Result<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        names.sort();
        Ok(names)
    };
    let before = listing(&env.root)?;
    for _ in 0..2 {
        let out = env.run(&["repair"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("checked sound (50 objects"), "{}", stdout(&out));
        assert!(!stdout(&out).contains("damaged"), "{}", stdout(&out));
    }
    assert_eq!(listing(&env.root)?, before, "repair left files behind");
    Ok(())
}

/// The story: one unreadable file among 1,001 aborted `import` with nothing stored, and
/// symbolic links and FIFOs were skipped without a word. Now each failure is reported,
/// the rest is stored, the exit code is 1, and what is skipped is named.
#[test]
fn import_stores_what_it_can_and_names_every_failure_and_skip() -> TestResult {
    let env = Env::new();
    let src = env.root.join("src");
    for i in 0..1_000u64 {
        env.file(&format!("src/o{i}.json"), &speckle_gen::object(6, i));
    }
    env.file("src/huge.bin", &vec![7u8; 200_000]);
    std::os::unix::fs::symlink(src.join("o1.json"), src.join("link.json"))?;
    let fifo = src.join("pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status()?.success(), "mkfifo");

    let out = env.run(&["--max-object-size", "100000", "import", s(&src)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("huge.bin is larger than the stash's object size limit"), "{err}");
    assert!(err.contains("skipped symbolic link") && err.contains("link.json"), "{err}");
    assert!(err.contains("skipped special file") && err.contains("pipe"), "{err}");
    assert!(stdout(&out).contains("imported 1000 files"), "{}", stdout(&out));
    let stats: serde_json::Value = serde_json::from_slice(&env.run(&["stats", "--json"]).stdout)?;
    assert_eq!(stats["objects"], 1_000);

    // --quiet silences the skips, never the failure.
    let out = env.run(&["-q", "--max-object-size", "100000", "import", s(&src)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("huge.bin") && !err.contains("skipped"), "{err}");
    Ok(())
}

/// JSON comes from serde_json: file names with quotes, backslashes, newlines or bytes
/// that are not UTF-8 still give valid JSON.
#[test]
fn json_survives_hostile_file_names() -> TestResult {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    let src = env.root.join("src");
    std::fs::create_dir_all(&src)?;
    let names: [&[u8]; 4] =
        [b"quote\"d.json", b"back\\slash.json", b"new\nline.json", b"bad\xff\xfe.json"];
    for (i, name) in names.iter().enumerate() {
        let path = src.join(std::ffi::OsStr::from_bytes(name));
        std::fs::write(&path, format!("{{\"n\":{i}}}"))?;
        std::os::unix::fs::symlink(
            &path,
            src.join(std::ffi::OsStr::from_bytes(&[*name, &b".lnk"[..]].concat())),
        )?;
    }
    let out = env.run(&["import", "--json", s(&src)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["files"], 4, "{report}");
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["path"].as_str())
        .collect();
    assert_eq!(skipped.len(), 4, "{report}");
    assert!(skipped.iter().any(|p| p.contains("quote\"d")), "{report}");
    assert!(skipped.iter().any(|p| p.contains("new\nline")), "{report}");

    let files: Vec<PathBuf> =
        names.iter().map(|n| src.join(std::ffi::OsStr::from_bytes(n))).collect();
    let out = env.cmd(&["put", "--json"]).args(&files).stdin(Stdio::null()).output()?;
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["stored"].as_array().map(Vec::len), Some(4), "{report}");
    Ok(())
}

#[test]
fn config_shows_and_changes_the_recorded_settings() -> TestResult {
    let env = Env::new();
    env.run_with_stdin(&["--durability", "safe", "put"], b"x");
    let out = env.run(&["config", "--json"]);
    let config: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (config["durability"].as_str(), config["codec"].as_str()),
        (Some("safe"), Some("gzip"))
    );
    // Another durability on a command is refused, naming the way to change it.
    let out = env.run(&["--durability", "fast", "stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("objstash config durability fast"), "{}", stderr(&out));
    let out = env.run(&["config", "durability", "fast"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stats: serde_json::Value = serde_json::from_slice(&env.run(&["stats", "--json"]).stdout)?;
    assert_eq!(stats["durability"], "fast");
    assert_eq!(env.run(&["config", "layout", "bucketed"]).status.code(), Some(2));
    assert_eq!(env.run(&["get", &key_of(b"x")]).stdout, b"x");
    Ok(())
}

#[test]
fn values_in_a_file_are_chosen_when_a_stash_is_made_and_kept() -> TestResult {
    let env = Env::new();
    let out = env.run_with_stdin(&["--values", "file", "put"], b"in a file");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut values = env.db.clone().into_os_string();
    values.push("-values");
    assert!(PathBuf::from(values).exists(), "no file of values beside the stash");
    let config: serde_json::Value = serde_json::from_slice(&env.run(&["config", "--json"]).stdout)?;
    assert_eq!(config["values"], "file", "{config}");
    // The stash keeps its values where it was made to: a later put asking for the other
    // place is refused, not ignored.
    let out = env.run_with_stdin(&["--values", "rows", "put"], b"also in the file");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    env.run_with_stdin(&["--values", "file", "put"], b"also in the file");
    assert_eq!(env.run(&["get", &key_of(b"also in the file")]).stdout, b"also in the file");
    let config: serde_json::Value = serde_json::from_slice(&env.run(&["config", "--json"]).stdout)?;
    assert_eq!(config["values"], "file", "{config}");
    // A command that makes nothing refuses the flag; a bad value is a usage error.
    assert_eq!(env.run(&["--values", "file", "stats"]).status.code(), Some(2));
    let out = env.run_with_stdin(&["--values", "disk", "put"], b"x");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("rows or file"), "{}", stderr(&out));
    Ok(())
}

/// Other processes read the stash while `import` writes it: `get`, `stats` and `has` all
/// succeed, and see what was stored before.
#[test]
fn reading_commands_run_while_import_writes() -> TestResult {
    let env = Env::new();
    let key = stdout(&env.run_with_stdin(&["put"], b"stored before")).trim().to_string();
    let src = env.root.join("src");
    for i in 0..20_000u64 {
        env.file(&format!("src/d{}/o{i}.json", i % 20), &speckle_gen::object(8, i));
    }
    let mut import =
        env.cmd(&["import", s(&src)]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let (mut rounds, mut during) = (0, 0);
    loop {
        let running = import.try_wait()?.is_none();
        if !running && rounds >= 3 {
            break;
        }
        during += usize::from(running);
        let out = env.run(&["get", &key]);
        assert_eq!(out.stdout, b"stored before", "{}", stderr(&out));
        let out = env.run(&["stats", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        assert!(stats["objects"].as_u64().is_some_and(|n| n >= 1), "{stats}");
        let out = env.run(&["has", &key]);
        assert!(out.status.success(), "{}", stderr(&out));
        rounds += 1;
    }
    assert!(during >= 1, "no read ran while the import was writing");
    let out = import.wait_with_output()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&env.run(&["stats", "--json"]).stdout)?;
    assert_eq!(stats["objects"], 20_001);
    assert!(env.run(&["verify"]).status.success());
    Ok(())
}

#[test]
fn names_put_get_resolve_unname_and_rm() -> TestResult {
    let env = Env::new();
    let wall = env.file("wall.json", br#"{"wall":1}"#);
    let out = env.run(&["put", "--name", "wall-17", s(&wall)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let key = key_of(br#"{"wall":1}"#);
    assert_eq!(stdout(&out).trim(), key);
    let out = env.run_with_stdin(&["put", "--name", "also the wall"], br#"{"wall":1}"#);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = env.run(&["get", "--name", "wall-17"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, br#"{"wall":1}"#);
    let out = env.run(&["get", "--name", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no object named \"nope\""), "{}", stderr(&out));

    let out = env.run(&["resolve", "wall-17", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), format!("{key} wall-17\n- nope\n"));
    let out = env.run_with_stdin(&["resolve", "--json", "-"], b"also the wall\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("[{{\"name\":\"also the wall\",\"key\":\"{key}\"}}]"));

    let out = env.run(&["stats", "--json"]);
    assert!(stdout(&out).contains("\"objects\":1,") && stdout(&out).contains("\"names\":2"));

    // Removing a name leaves the object; removing the object drops its other names.
    let out = env.run(&["unname", "wall-17", "wall-17"]);
    assert_eq!(out.status.code(), Some(1), "the second is no longer there");
    let out = env.run(&["get", &key]);
    assert!(out.status.success());
    let out = env.run(&["rm", &key]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["resolve", "also the wall"]);
    assert_eq!(stdout(&out), "- also the wall\n");
    let out = env.run(&["stats", "--json"]);
    assert!(stdout(&out).contains("\"names\":0"), "{}", stdout(&out));

    // One name names one object; a name no save accepts is a clear error.
    let other = env.file("other.json", b"{}");
    let out = env.run(&["put", "--name", "x", s(&wall), s(&other)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let long = "n".repeat(objstash::MAX_NAME_LEN + 1);
    let out = env.run(&["put", "--name", &long, s(&wall)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("a name must be 1 to 1024 bytes long"), "{}", stderr(&out));
    let out = env.run(&["get", "--name", "x", &key]);
    assert_eq!(out.status.code(), Some(2), "a key and a name conflict");
    Ok(())
}

#[test]
fn a_cap_trims_and_pins_from_the_command_line() -> TestResult {
    let env = Env::new();
    let noise = |seed: u8| noise(u64::from(seed), 64 * 1024);
    let kept = env.file("kept.bin", &noise(1));
    let put = env.run(&["put", "--pin", kept.to_str().unwrap()]);
    assert!(put.status.success(), "{}", stderr(&put));
    let kept_key = stdout(&put).trim().to_string();
    let mut cached = Vec::new();
    for seed in 2..6 {
        let file = env.file(&format!("c{seed}.bin"), &noise(seed));
        let out = env.run(&["put", file.to_str().unwrap()]);
        cached.push(stdout(&out).trim().to_string());
    }
    // Bad sizes and ages are usage errors that change nothing.
    for args in [
        &["config", "max-size", "2 parsecs"][..],
        &["config", "max-size", "0"],
        &["trim", "--unused-for", "3y"],
        &["trim"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let config = env.run(&["config"]);
    assert!(stdout(&config).contains("max-size    none"), "{}", stdout(&config));

    // Past the resolution of uses (5 s), a read records a use: the object read below is
    // then the newest.
    std::thread::sleep(std::time::Duration::from_millis(5_500));
    let out = env.run(&["get", &cached[3], "-o", env.root.join("read.bin").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = env.run(&["trim", "--unused-for", "3s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("evicted 3 objects"), "{}", stdout(&out));
    let has = env.run(&["has", &kept_key, &cached[0], &cached[3]]);
    assert_eq!(
        stdout(&has).lines().map(|l| l.ends_with("present")).collect::<Vec<_>>(),
        [true, false, true]
    );

    // A cap of a few KiB: the pinned object alone is over it, and stats says so; the
    // object read above (longer ago than the grace period, 100 ms) goes.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let out = env.run(&["--json", "config", "max-size", "100K"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("over its size cap"), "{}", stderr(&out));
    let stats: serde_json::Value = serde_json::from_slice(&env.run(&["--json", "stats"]).stdout)?;
    assert_eq!(stats["max_size"], 100 * 1024);
    assert_eq!(stats["over_cap"], true);
    assert_eq!(stats["pinned_objects"], 1);
    assert_eq!(stats["evicted_objects"], 4);
    assert_eq!(stats["objects"], 1);

    // Unpinned, the last one goes too at the next trim.
    assert!(env.run(&["unpin", &kept_key]).status.success());
    assert_eq!(env.run(&["unpin", &kept_key]).status.code(), Some(1));
    assert_eq!(env.run(&["pin", &cached[0]]).status.code(), Some(1));
    let config = env.run(&["config"]);
    assert!(stdout(&config).contains("max-size    102400 bytes"), "{}", stdout(&config));
    assert!(env.run(&["config", "max-size", "none"]).status.success());
    let verify = env.run(&["verify"]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    Ok(())
}

#[test]
fn large_objects_stream_through_put_and_get() -> TestResult {
    let env = Env::new();
    let object = noise(7, 48 << 20);
    // From stdin, named, fed by a thread while `put` reads.
    let mut child = env
        .cmd(&["put", "--name", "model.parquet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("stdin");
    let feed = {
        let object = object.clone();
        std::thread::spawn(move || stdin.write_all(&object))
    };
    let out = child.wait_with_output()?;
    feed.join().expect("feeder")?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), key_of(&object));
    // From a file: the same key, stored once.
    let file = env.file("model.parquet", &object);
    let out = env.run(&["put", s(&file)]);
    assert_eq!(stdout(&out).trim(), key_of(&object), "{}", stderr(&out));
    let out = env.run(&["get", &key_of(&object)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout == object, "get to stdout gave {} bytes", out.stdout.len());
    let target = env.root.join("back.parquet");
    let out = env.run(&["get", "--name", "model.parquet", "-o", s(&target)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(&target)? == object);
    let out = env.run(&["stats"]);
    assert!(stdout(&out).contains("chunks"), "{}", stdout(&out));
    let out = env.run(&["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    Ok(())
}

/// With the first 100 bytes of a stash zeroed, `verify`, `put` and `repair` all said "not a
/// SQLite database, so it is not a stash; pass the path of a stash or of a file that does
/// not exist yet", every row intact and the hint inviting the user to delete the file.
/// They name the damage and send the user to `repair`, which keeps every object.
#[test]
fn a_stash_whose_header_is_gone_is_named_and_repaired() -> TestResult {
    let env = Env::new();
    let dir = env.root.join("objects");
    for i in 0..300 {
        env.file(
            &format!("objects/{i}.json"),
            format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i)).as_bytes(),
        );
    }
    let out = env.run(&["import", s(&dir)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut bytes = std::fs::read(&env.db)?;
    bytes[..100].fill(0);
    std::fs::write(&env.db, &bytes)?;
    for args in [&["verify"][..], &["put", s(&dir.join("1.json"))], &["ls"]] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("header") && err.contains("objstash repair"), "{args:?}: {err}");
        assert!(!err.contains("not a SQLite database"), "{err}");
    }
    assert_eq!(std::fs::read(&env.db)?, bytes, "nothing was changed");
    let out = env.run(&["repair"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("kept 300 objects, all it recorded"), "{}", stdout(&out));
    let out = env.run(&["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = env.run(&["get", &key_of(br#"{"n":0,"pad":""}"#)]);
    assert_eq!(stdout(&out), r#"{"n":0,"pad":""}"#);
    Ok(())
}

/// Small surprises a new user met: `trim` with no flag named only `--unused-for`; `config
/// --json` said `max_object_size: 18446744073709551615` for "no limit"; a bad name exited
/// 1 where a bad key exits 2; `--values file` on a stash that keeps them in rows was
/// ignored; errors named the library's builder methods.
#[test]
fn the_command_line_speaks_in_its_own_terms() -> TestResult {
    let env = Env::new();
    assert!(env.run_with_stdin(&["put"], b"one").status.success());
    let out = env.run(&["trim"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--max-size") && stderr(&out).contains("--unused-for"));
    let out = env.run(&["--json", "config"]);
    let config: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(config["max_object_size"], serde_json::Value::Null, "{config}");
    let out = env.run(&["get", "--name", ""]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = env.run_with_stdin(&["--values", "file", "put"], b"two");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("keeps its values in rows"), "{}", stderr(&out));
    assert_eq!(stdout(&env.run(&["ls"])).lines().count(), 1, "nothing was stored");
    let missing = Env::new();
    let out = missing.run(&["ls"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).contains("StashBuilder"), "{}", stderr(&out));
    assert!(stderr(&out).contains("only put and import create a stash"), "{}", stderr(&out));
    let help = stdout(&env.run(&["config", "--help"]));
    assert!(help.contains("owned"), "{help}");
    Ok(())
}

/// The story: an import into a capped stash said "5472 new objects, 24.4 MiB stored" while
/// the cap evicted 36,014 objects meanwhile; two imports at once each counted the other's
/// objects; and no import said which key belonged to which file. An import counts what it
/// stored that was new, says what the cap evicted meanwhile, lists `KEY PATH` with
/// `--keys` and names objects by path with `--names`.
#[test]
fn import_counts_its_own_objects_reports_evictions_and_lists_keys() -> TestResult {
    let env = Env::new();
    for i in 0..1_500u64 {
        env.file(&format!("a/d{}/o{i}.json", i % 5), &speckle_gen::object(41, i));
        env.file(&format!("b/o{i}.json"), &speckle_gen::object(42, i));
    }
    assert!(env.run_with_stdin(&["put"], b"first").status.success());
    // Two imports at once, of different objects: each counts its own.
    let spawn = |dir: &str| {
        env.cmd(&["--json", "import", s(&env.root.join(dir))])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
    };
    let (a, b) = (spawn("a")?, spawn("b")?);
    for child in [a, b] {
        let out = child.wait_with_output()?;
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        assert_eq!(report["new_objects"], 1_500, "{report}");
        assert_eq!(report["evicted_objects"], 0, "{report}");
    }

    // KEY PATH lines, names by path.
    let fresh = Env::new();
    let out = fresh.run(&["import", "--keys", "--names", s(&env.root.join("a"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    assert_eq!(listed.lines().count(), 1_500, "{listed}");
    let object = speckle_gen::object(41, 7);
    assert!(listed.contains(&format!("{} d2/o7.json", key_of(&object))), "{listed}");
    assert_eq!(fresh.run(&["get", "--name", "d2/o7.json"]).stdout, object);

    // Into a cap: what the cap evicted is news, and the figures agree with stats.
    let capped = Env::new();
    assert!(capped.run_with_stdin(&["put"], b"first").status.success());
    assert!(capped.run(&["config", "max-size", "400KiB"]).status.success());
    let out = capped.run(&["--json", "import", s(&env.root.join("b"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert!(report["evicted_objects"].as_u64() > Some(0), "{report}");
    let stats: serde_json::Value =
        serde_json::from_slice(&capped.run(&["--json", "stats"]).stdout)?;
    assert_eq!(report["stash_stored_bytes"], stats["stored_bytes"], "{report} {stats}");
    assert_eq!(report["evicted_objects"], stats["evicted_objects"], "{report} {stats}");
    assert_eq!(stats["over_cap"], false, "{stats}");
    let out = capped.run(&["import", s(&env.root.join("a"))]);
    assert!(stderr(&out).contains("the size cap evicted"), "{}", stderr(&out));
    // A lowered cap's figures are the ones stats gives next.
    let before: serde_json::Value =
        serde_json::from_slice(&capped.run(&["--json", "stats"]).stdout)?;
    let out = capped.run(&["--json", "config", "max-size", "200KiB"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lowered: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let after: serde_json::Value =
        serde_json::from_slice(&capped.run(&["--json", "stats"]).stdout)?;
    let evicted = |v: &serde_json::Value| v["evicted_objects"].as_u64().unwrap_or(0);
    assert_eq!(evicted(&before) + evicted(&lowered), evicted(&after), "{lowered} {after}");
    assert_eq!(after["over_cap"], false, "{after}");
    Ok(())
}

#[test]
fn stats_shows_the_hit_rate_of_every_command_and_zero_counts_from_then() -> TestResult {
    let env = Env::new();
    let a = env.file("a.json", br#"{"id":"a"}"#);
    let b = env.file("b.json", br#"{"id":"b"}"#);
    assert!(env.run(&["put", s(&a), s(&b), s(&a)]).status.success());
    // Each command is a process of its own; each one's calls count in the stash.
    for _ in 0..3 {
        assert!(env.run(&["get", &key_of(br#"{"id":"a"}"#)]).status.success());
    }
    assert!(!env.run(&["get", &key_of(b"absent")]).status.success());
    let out = env.run(&["has", &key_of(br#"{"id":"b"}"#), &key_of(b"absent")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains(" missing"), "{}", stdout(&out));

    let out = env.run(&["stats", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let counters = &report["counters"];
    assert_eq!(counters["hits"], 3, "{report}");
    assert_eq!(counters["misses"], 1, "{report}");
    assert_eq!(counters["hit_rate"], 0.75, "{report}");
    assert_eq!((counters["found"].clone(), counters["absent"].clone()), (1.into(), 1.into()));
    assert_eq!((counters["saved"].clone(), counters["saved_again"].clone()), (2.into(), 1.into()));
    assert!(counters["since_unix_ms"].as_u64().is_some(), "{report}");

    let out = env.run(&["stats", "--zero"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("hits                              3 / 4             75.00 %  of keys read"),
        "{text}"
    );
    assert!(stderr(&out).contains("counters zeroed"), "{}", stderr(&out));
    let out = env.run(&["stats", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["counters"]["hits"], 0, "{report}");
    assert_eq!(report["counters"]["hit_rate"], serde_json::Value::Null, "{report}");
    assert_eq!(report["objects"], 2, "{report}");
    Ok(())
}

#[test]
fn objstash_log_prints_the_spans_of_a_command_with_their_sizes_and_times() -> TestResult {
    let env = Env::new();
    for i in 0..40u64 {
        env.file(&format!("src/o{i}.json"), &speckle_gen::object(9, i));
    }
    let out = env
        .cmd(&["import", s(&env.root.join("src"))])
        .env("OBJSTASH_LOG", "objstash=debug")
        .output()?;
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("save_batch{objects=40 bytes="), "{err}");
    assert!(err.contains("commit{rows="), "{err}");
    assert!(err.contains("time.busy="), "{err}");
    // Unset, nothing is printed but what the command says.
    let out = env.run(&["stats"]);
    assert!(!stderr(&out).contains("time.busy"), "{}", stderr(&out));
    // A filter that does not parse is a usage error that names it.
    let out = env.cmd(&["stats"]).env("OBJSTASH_LOG", "objstash=loud").output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("OBJSTASH_LOG=\"objstash=loud\" is not a filter"),
        "{}",
        stderr(&out)
    );
    Ok(())
}
