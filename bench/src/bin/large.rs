//! Large objects: save and read back one object of `--size-mib` through the library and
//! the command line, against `cp` of the same file, with each process's peak resident
//! memory; then the bytes a second version with a small edit adds.
//!
//! `cargo build --release -p objstash-cli && cargo run --release -p objstash-bench --bin
//! large -- --size-mib 1024` (the command line is found beside this binary). Each measured
//! step runs in a process of its own, so its peak memory is its own; the CLI's is read with
//! `/usr/bin/time`.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use objstash::{Key, Stash};

#[derive(Parser)]
struct Args {
    /// The object's size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Where the files go (a temporary directory by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Internal: run one measured step (`save DB FILE` or `read DB KEY OUT`).
    #[arg(long, num_args = 1.., value_name = "STEP")]
    child: Option<Vec<String>>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(step) = args.child {
        return child(&step);
    }
    let temp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let size = args.size_mib << 20;
    let source = dir.join("object.bin");
    write_source(&source, size, None)?;
    let mib = size as f64 / f64::from(1 << 20);
    println!(
        "object: {} MiB (half text-like, half incompressible, in 4 MiB stretches)",
        args.size_mib
    );

    // The second of two copies: the source in the page cache, as for the saves below.
    let copy = dir.join("copy.bin");
    let mut cp_secs = 0.0;
    for _ in 0..2 {
        let began = Instant::now();
        let status = Command::new("cp").arg(&source).arg(&copy).status()?;
        anyhow::ensure!(status.success(), "cp failed");
        cp_secs = began.elapsed().as_secs_f64();
        std::fs::remove_file(&copy)?;
    }
    println!("cp                      {:>8.1} MB/s", size as f64 / 1e6 / cp_secs);

    let db = dir.join("stash.db");
    let baseline = run_child(&["baseline", path(&dir.join("baseline.db"))?])?;
    let base_kib: f64 = baseline["peak_kib"].parse()?;
    println!("baseline (open, save and read 1 KiB, close): peak {:.1} MiB", base_kib / 1024.0);
    let saved = run_child(&["save", path(&db)?, path(&source)?])?;
    let key = saved.get("key").context("no key")?.clone();
    report("library save_file", size, &saved, cp_secs);
    let back = dir.join("back.bin");
    let read = run_child(&["read", path(&db)?, &key, path(&back)?])?;
    report("library open_reader", size, &read, cp_secs);
    std::fs::remove_file(&back)?;

    let cli = std::env::current_exe()?.with_file_name("objstash");
    if cli.exists() && Path::new("/usr/bin/time").exists() {
        let cli_db = dir.join("cli.db");
        let put = timed(Command::new(&cli).arg("--db").arg(&cli_db).arg("put").arg(&source))?;
        report("objstash put FILE", size, &put, cp_secs);
        let get = timed(
            Command::new(&cli).arg("--db").arg(&cli_db).args(["get", &key, "-o"]).arg(&back),
        )?;
        report("objstash get -o FILE", size, &get, cp_secs);
        std::fs::remove_file(&back)?;
        std::fs::remove_file(&cli_db)?;
    } else {
        println!("(the command line is measured once `cargo build --release -p objstash-cli` ran)");
    }

    // A second version: 100 bytes inserted in the middle.
    let edited = dir.join("edited.bin");
    write_source(&edited, size, Some(size / 2))?;
    let before = Stash::open(&db)?.stats()?;
    let second = run_child(&["save", path(&db)?, path(&edited)?])?;
    let after = Stash::open(&db)?.stats()?;
    let added = after.chunk_bytes.saturating_sub(before.chunk_bytes);
    println!(
        "second version (100 bytes inserted mid-file): {} bytes added = {:.4}% of its size, \
         saved at {:.1} MB/s",
        added,
        added as f64 * 100.0 / size as f64,
        size as f64 / 1e6 / second["secs"].parse::<f64>()?
    );
    println!(
        "stash: {} objects, {} chunks, {:.1} MiB stored for {:.1} MiB of objects",
        after.objects,
        after.chunks,
        after.stored_bytes as f64 / f64::from(1 << 20),
        2.0 * mib
    );
    Ok(())
}

fn path(p: &Path) -> Result<&str> {
    p.to_str().context("a path that is not UTF-8")
}

/// Writes the object: 4 MiB stretches alternating between text-like lines and noise,
/// with 100 bytes inserted at `insert` if given.
fn write_source(path: &Path, size: u64, insert: Option<u64>) -> Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let stretch = 4u64 << 20;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut written = 0u64;
    let mut block = Vec::with_capacity(1 << 20);
    while written < size {
        block.clear();
        let n = (1u64 << 20).min(size - written);
        if (written / stretch).is_multiple_of(2) {
            let mut line = 0u64;
            while (block.len() as u64) < n {
                let text =
                    format!("{{\"id\":\"{written}-{line}\",\"type\":\"Mesh\",\"v\":[1.5,2.5]}}\n");
                block.extend_from_slice(text.as_bytes());
                line += 1;
            }
            block.truncate(n as usize);
        } else {
            for _ in 0..n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                block.push(state as u8);
            }
        }
        if let Some(at) = insert.filter(|&at| at >= written && at < written + n) {
            let split = (at - written) as usize;
            out.write_all(&block[..split])?;
            out.write_all(&[b'!'; 100])?;
            out.write_all(&block[split..])?;
        } else {
            out.write_all(&block)?;
        }
        written += n;
    }
    out.flush()?;
    Ok(())
}

type Figures = std::collections::HashMap<String, String>;

fn report(what: &str, size: u64, figures: &Figures, cp_secs: f64) {
    let secs: f64 = figures["secs"].parse().unwrap_or(f64::NAN);
    let peak: f64 = figures["peak_kib"].parse().unwrap_or(f64::NAN);
    println!(
        "{what:<23} {:>8.1} MB/s  {:>5.2}x cp's time  peak {:>6.1} MiB",
        size as f64 / 1e6 / secs,
        secs / cp_secs,
        peak / 1024.0
    );
}

/// Runs a step in a child process; its `name value` lines.
fn run_child(step: &[&str]) -> Result<Figures> {
    let out = Command::new(std::env::current_exe()?).arg("--child").args(step).output()?;
    if !out.status.success() {
        bail!("step {step:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect())
}

/// Runs a command under `/usr/bin/time`: its seconds and peak memory.
fn timed(cmd: &mut Command) -> Result<Figures> {
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let began = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("peak_kib %M")
        .arg(program)
        .args(args)
        .output()?;
    let secs = began.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let peak = stderr.lines().rev().find_map(|l| l.strip_prefix("peak_kib ")).context("no peak")?;
    Ok([("secs".to_string(), secs.to_string()), ("peak_kib".to_string(), peak.to_string())].into())
}

fn child(step: &[String]) -> Result<()> {
    let began = Instant::now();
    match step.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["save", db, file] => {
            let stash = Stash::open(db)?;
            let key = stash.save_file(file)?;
            stash.close()?;
            println!("key {key}");
        }
        ["baseline", db] => {
            let stash = Stash::open(db)?;
            let key = stash.save(&[7u8; 1024])?;
            stash.flush()?;
            anyhow::ensure!(stash.get(&key)?.is_some());
            stash.close()?;
        }
        ["read", db, key, out] => {
            let stash = Stash::open(db)?;
            let key: Key = key.parse()?;
            let mut reader = stash.open_reader(&key)?.context("not stored")?;
            let mut file = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = reader.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                file.write_all(&buf[..n])?;
            }
            file.flush()?;
        }
        _ => bail!("unknown step {step:?}"),
    }
    println!("secs {}", began.elapsed().as_secs_f64());
    println!("peak_kib {}", peak_kib()?);
    Ok(())
}

/// This process's peak resident memory (Linux).
fn peak_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("no value")?.parse()?)
}
