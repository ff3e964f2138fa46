//! An assembly whose process died (SIGKILL between its saves and its root) held its
//! objects as being assembled for as long as any other handle kept the stash open: 4x the
//! cap, every other save evicted instead. Every assembly has an owner whose liveness the
//! kernel keeps (a lock its process holds); another handle's writer gives a dead owner's
//! assemblies up within about a second, and what they held goes as loose objects.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{TestResult, noise, sibling, spawn_child, wait_until_open};
use objstash::Stash;

const CHILD_ENV: &str = "OBJSTASH_ASSEMBLER_CHILD";
const CAP: u64 = 2 << 20;

/// The child: opens the stash, saves 8 MiB into an assembly, commits, says so, and waits
/// to be killed.
#[test]
#[ignore = "run as a child process by the liveness test"]
fn assembler_child() -> TestResult {
    let Some(db) = std::env::var_os(CHILD_ENV) else { return Ok(()) };
    let db = PathBuf::from(db);
    let stash = Stash::builder().max_size(CAP).eviction_grace(Duration::ZERO).open(&db)?;
    std::fs::write(sibling(&db, ".acked"), "open\n")?;
    let assembly = stash.assemble()?;
    for i in 0..64 {
        assembly.save(&noise(500 + i, 128 << 10))?;
    }
    stash.flush()?;
    std::fs::write(sibling(&db, ".acked"), "open\nassembled\n")?;
    std::thread::park();
    drop(assembly);
    Ok(())
}

#[test]
fn a_killed_assemblers_objects_go_while_other_handles_keep_the_stash_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("assembler.db");
    let stash = Stash::builder().max_size(CAP).eviction_grace(Duration::ZERO).open(&db)?;
    stash.save(b"the stash is open in this process for the whole test")?;
    let mut child = spawn_child(
        "models_liveness::assembler_child",
        CHILD_ENV,
        db.to_string_lossy().into_owned(),
    )?;
    wait_until_open(&db, &mut child)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(sibling(&db, ".acked"))?.contains("assembled") {
        anyhow::ensure!(child.try_wait()?.is_none(), "the child exited early");
        anyhow::ensure!(Instant::now() < deadline, "the child did not assemble");
        std::thread::sleep(Duration::from_millis(5));
    }
    let held = stash.stats()?.stored_bytes;
    assert!(held > 4 * CAP, "the assembly holds {held} bytes over a {CAP}-byte cap");
    // Dropping the reaped child kills it and waits for it.
    drop(child);
    // This handle saves on: its writer finds the assembler gone and gives its assembly
    // up, and the cap evicts what it held. The deadline only catches a hang.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seed = 0;
    loop {
        stash.save(&noise(10_000 + seed, 16 << 10))?;
        stash.flush()?;
        seed += 1;
        let stored = stash.stats()?.stored_bytes;
        if stored <= CAP {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{stored} bytes stored over a {CAP}-byte cap after {seed} saves: the dead \
             assembler's objects are still held"
        );
    }
    stash.close()?;
    Ok(())
}
