//! What every test of the command line uses: a temporary directory with a stash path in
//! it, the binary run there, and its output as text.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

pub struct Env {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub db: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        Env { db: root.join("cli.db"), root, _dir: dir }
    }

    /// Files in a temporary directory, the stash at `db` (on a file system of the test's).
    pub fn with_db(db: PathBuf) -> Env {
        Env { db, ..Env::new() }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_objstash"));
        cmd.arg("--db").arg(&self.db).args(args).env_remove("OBJSTASH_DB");
        // Traces on stderr only where a test asks for them.
        cmd.env_remove("OBJSTASH_LOG").env_remove("RUST_LOG");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().expect("run objstash")
    }

    pub fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn objstash");
        // A command that fails before it reads (a usage error) may have closed its stdin.
        match child.stdin.take().expect("stdin").write_all(input) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write stdin: {e}"),
            _ => {}
        }
        child.wait_with_output().expect("wait")
    }

    pub fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.root.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn key_of(bytes: &[u8]) -> String {
    objstash::Key::of(bytes).to_string()
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
