//! A tmpfs mounted for a test's life: a file system the test may fill or make read-only
//! (root only; where mounting fails the test says so rather than passing).

use std::path::PathBuf;
use std::process::Command;

/// A tmpfs mounted for the life of the value; `None` where this process may not mount.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then_some(Tmpfs { dir })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Fills the file system to its last block with a file of its own (`ballast`), as
    /// another program (downloads, builds, logs) would.
    pub fn fill(&self) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(self.dir.path().join("ballast"))?;
        for chunk in [1 << 20, 4 << 10, 512] {
            let bytes = vec![7u8; chunk];
            while file.write_all(&bytes).is_ok() {}
        }
        // What the kernel buffered and could not place is dropped with the error.
        let _ = file.sync_all();
        Ok(())
    }

    pub fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.dir.path())
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).output();
    }
}
