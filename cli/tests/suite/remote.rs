//! `push`, `pull`, `remote status`, `remote missing` and read-through `get`, run as a user
//! would against a real S3 server (SeaweedFS on loopback: tests/suite/common/s3.rs).

use crate::s3;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `objstash --db <db> --remote s3://objstash/<prefix> --endpoint <server> args...`, with the
/// credentials in the environment as the AWS tools read them.
fn run(server: &s3::S3Server, db: &Path, prefix: &str, args: &[&str], stdin: &[u8]) -> Output {
    run_at(&server.endpoint(), db, prefix, args, stdin)
}

/// As [`run`], against the S3 server at `endpoint`.
fn run_at(endpoint: &str, db: &Path, prefix: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .arg("--db")
        .arg(db)
        .args(["--remote", &format!("s3://{}/{prefix}", s3::BUCKET), "--endpoint"])
        .arg(endpoint)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", s3::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", s3::SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .env_remove("OBJSTASH_REMOTE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn objstash");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().expect("wait")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn push_pull_status_missing_and_read_through() -> TestResult {
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    let (a, b, c) = (dir.path().join("a.db"), dir.path().join("b.db"), dir.path().join("c.db"));
    let mut keys = Vec::new();
    for i in 0..50 {
        let file = dir.path().join(format!("{i}.json"));
        let body = format!("{{\"id\":{i},\"pad\":\"{}\"}}", "x".repeat(i * 10));
        std::fs::write(&file, &body)?;
        let out = run(&server, &a, "cli", &["put", file.to_str().unwrap()], b"");
        assert!(out.status.success(), "{}", text(&out.stderr));
        keys.push((text(&out.stdout).trim().to_string(), body));
    }
    let out = run(&server, &a, "cli", &["--json", "push"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pushed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(pushed["objects"], 50);
    assert_eq!(pushed["packs"], 1);

    // Read-through: b has nothing, get fetches the object from the remote.
    let (key, body) = &keys[7];
    std::fs::write(dir.path().join("seed"), b"seed")?;
    let out = run(&server, &b, "cli", &["put", dir.path().join("seed").to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&server, &b, "cli", &["get", key], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), *body);

    let unknown = objstash::Key::of(b"not pushed").to_string();
    let input = format!("{key}\n{unknown}\n");
    let out = run(&server, &b, "cli", &["remote", "missing", "-"], input.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), unknown);

    let out = run(&server, &b, "cli", &["--json", "remote", "status"], b"");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!((status["objects"].as_u64(), status["packs"].as_u64()), (Some(50), Some(1)));
    assert!(status["bytes"].as_u64() > Some(0) && status["local_index_bytes"].as_u64() > Some(0));
    // B's catalog was filled by the reads above: the status lists the pack log from its
    // cursor less the clock margin (10 minutes: the one push), in one request, and reads
    // the records of the last collection and trim in two more.
    assert_eq!(status["full_listing"].as_bool(), Some(false), "{status}");
    assert_eq!((status["listed"].as_u64(), status["requests"].as_u64()), (Some(1), Some(3)));
    assert!(status["last_collection"].is_null(), "{status}");

    // A collection finds nothing to collect and says so; the status then shows it.
    let out = run(&server, &b, "cli", &["--json", "remote", "gc", "--grace", "0s"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let collected: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (collected["duplicates"].as_u64(), collected["deleted"].as_u64()),
        (Some(0), Some(0))
    );
    let out = run(&server, &b, "cli", &["remote", "status"], b"");
    assert!(text(&out.stdout).contains("last collection"), "{}", text(&out.stdout));
    let out = run(&server, &b, "cli", &["remote", "gc", "--grace", "soon"], b"");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not an age"), "{}", text(&out.stderr));

    // Pull creates a stash that did not exist and fills it.
    let out = run(&server, &c, "cli", &["--json", "pull"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pulled: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(pulled["objects"], 50);
    let out = run(&server, &c, "cli", &["verify"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A compaction; a new machine then reads through the compacted index.
    let out = run(&server, &c, "cli", &["--json", "remote", "compact"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let compacted: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(compacted["entries"].as_u64(), Some(50), "{compacted}");
    let d = dir.path().join("d.db");
    let seed = dir.path().join("seed");
    assert!(run(&server, &d, "cli", &["put", seed.to_str().unwrap()], b"").status.success());
    let out = run(&server, &d, "cli", &["get", key], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), *body);
    let out = run(&server, &d, "cli", &["--json", "remote", "status"], b"");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!((status["objects"].as_u64(), status["index_shards"].as_u64()), (Some(50), Some(1)));

    // A trim needs a size or an age; with a size of 0 every pack goes.
    let out = run(&server, &c, "cli", &["remote", "trim"], b"");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--max-size"), "{}", text(&out.stderr));
    let out = run(&server, &c, "cli", &["--json", "remote", "trim", "--max-size", "0"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let trimmed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    // What stays (the log, the compacted index, use reports) still counts.
    assert_eq!(trimmed["over_size"].as_u64(), Some(1), "{trimmed}");
    assert!(trimmed["size_after"].as_u64() < trimmed["size_before"].as_u64(), "{trimmed}");
    let out = run(&server, &c, "cli", &["remote", "status"], b"");
    assert!(text(&out.stdout).contains("0 objects in 0 packs"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("last trim 0 s ago:"), "{}", text(&out.stdout));
    Ok(())
}

#[test]
fn gc_and_trim_that_could_not_read_every_index_say_so_and_exit_1() -> TestResult {
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    let (a, c) = (dir.path().join("a.db"), dir.path().join("c.db"));
    let file = dir.path().join("object.json");
    std::fs::write(&file, b"{\"id\":1}")?;
    let out = run(&server, &a, "unread", &["put", file.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&server, &a, "unread", &["push"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&server, &c, "unread", &["put", file.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The collecting machine's every read of an index fails (503 from a loopback proxy).
    let proxy = crate::faulty::FaultyProxy::start(&server.endpoint());
    proxy.fail_reads_of("/unread/indexes/");
    let gc = |args: &[&str]| run_at(&proxy.endpoint(), &c, "unread", args, b"");
    let out = gc(&["--quiet", "remote", "gc"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("collect again"), "{}", text(&out.stderr));
    let out = gc(&["--json", "remote", "gc"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["left_unread"].as_u64(), Some(1), "{report}");
    let out = gc(&["remote", "trim", "--unused-for", "1d"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("trim again"), "{}", text(&out.stderr));
    // The server back: both finish, exit 0.
    proxy.heal();
    for args in [&["remote", "gc"][..], &["remote", "trim", "--unused-for", "1d"]] {
        let out = gc(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    Ok(())
}

#[test]
fn remote_commands_without_a_remote_are_usage_errors() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("x.db");
    for args in [&["push"][..], &["pull"], &["remote", "status"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
            .arg("--db")
            .arg(&db)
            .args(args)
            .env_remove("OBJSTASH_REMOTE")
            .output()?;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains("needs a remote"), "{}", text(&out.stderr));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .arg("--db")
        .arg(&db)
        .args(["--remote", "http://nope", "push"])
        .output()?;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("s3://"), "{}", text(&out.stderr));
    Ok(())
}

/// The README's read-through on a new machine: `get KEY` failed with "there is no stash"
/// (only put and import created one), and `get --name` never read through (it resolved
/// locally). Both read through the remote, and the first makes the stash.
#[test]
fn a_new_machine_reads_through_by_key_and_by_name() -> TestResult {
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir()?;
    let (a, fresh, other) =
        (dir.path().join("a.db"), dir.path().join("new.db"), dir.path().join("other.db"));
    let file = dir.path().join("wall.json");
    std::fs::write(&file, br#"{"wall":17}"#)?;
    let out = run(&server, &a, "nm", &["put", "--name", "wall-17", file.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = text(&out.stdout).trim().to_string();
    assert!(run(&server, &a, "nm", &["push"], b"").status.success());

    assert!(!fresh.exists());
    let out = run(&server, &fresh, "nm", &["get", &key], b"");
    assert!(out.status.success(), "a new machine's get: {}", text(&out.stderr));
    assert_eq!(out.stdout, br#"{"wall":17}"#);
    assert!(fresh.exists(), "the read made the stash");

    let out = run(&server, &other, "nm", &["get", "--name", "wall-17"], b"");
    assert!(out.status.success(), "get --name through the remote: {}", text(&out.stderr));
    assert_eq!(out.stdout, br#"{"wall":17}"#);
    // Kept, named, here: read again with no remote at all.
    let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .arg("--db")
        .arg(&other)
        .args(["get", "--name", "wall-17"])
        .env_remove("OBJSTASH_REMOTE")
        .output()?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A name the remote does not have either: not found, exit 1.
    let out = run(&server, &other, "nm", &["get", "--name", "beam-3"], b"");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    Ok(())
}

/// A server that stops answering (SIGSTOP) held one `get` four times the documented 30 s,
/// with no message. A request, its retries included, gives up after the timeout
/// (`--remote-timeout`), and the error says so.
#[test]
fn a_server_that_does_not_answer_fails_a_read_with_its_timeout_named() -> TestResult {
    // Accepts connections and never answers: a stopped server as a client meets it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let endpoint = format!("http://{}", silent.local_addr()?);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir()?;
    let key = objstash::Key::of(b"on a stuck server").to_string();
    let out = run_at(
        &endpoint,
        &dir.path().join("new.db"),
        "stuck",
        &["--remote-timeout", "2s", "get", &key],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("gives up after 2s in 4 attempts"), "{stderr}");
    Ok(())
}
