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
