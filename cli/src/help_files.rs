//! `completions SHELL` and `man DIR`: the shell's completion script and the man pages, made
//! from the command line's own definition (clap), so that they list every command and flag
//! this build has. Neither needs a stash.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::Cli;
use crate::output::Failure;

/// Writes the completion script of `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "objstash", &mut script);
    write_stdout(&script)
}

/// Writes the man pages (roff) into `dir`, made if missing: `objstash.1` and one for each
/// command (`objstash-put.1`, `objstash-model-put.1`, ...), which the first refers to; prints
/// the path of each.
pub fn man(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::io(format!("making {}", dir.display()), e))?;
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    pages(command, dir, &mut written)
        .map_err(|e| Failure::io(format!("writing the man pages into {}", dir.display()), e))?;
    let list: String = written.iter().map(|path| format!("{}\n", path.display())).collect();
    write_stdout(list.as_bytes())
}

/// The page of `command` and of each of its commands, depth first.
fn pages(command: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        pages(sub, dir, written)?;
    }
    written.push(clap_mangen::Man::new(command).generate_to(dir)?);
    Ok(())
}

fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::BrokenPipe),
        done => done.map_err(|e| Failure::io("writing to stdout", e)),
    }
}
