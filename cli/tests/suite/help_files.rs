//! `completions` and `man` (#79): made from the command line's own definition, they name
//! every command and flag, need no stash, and a completion script really completes in bash.

use std::process::Command;

use crate::common::*;

const COMMANDS: &[&str] = &["put", "get", "import", "export", "verify", "repair", "trim", "model"];

/// Runs `objstash ARGS` with no stash given anywhere, in an empty directory.
fn run_without_a_stash(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_objstash"))
        .args(args)
        .current_dir(dir.path())
        .env_remove("OBJSTASH_DB")
        .output()
        .expect("run objstash");
    (out, dir)
}

#[test]
fn a_completion_script_completes_commands_and_flags_in_bash() -> TestResult {
    let (out, dir) = run_without_a_stash(&["completions", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = dir.path().join("objstash.bash");
    std::fs::write(&script, &out.stdout)?;
    // As bash's programmable completion calls it: the words so far, the word at the cursor.
    let complete = |line: &str| -> Result<Vec<String>, String> {
        let words: Vec<&str> = line.split(' ').collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; \
             COMP_POINT=${{#COMP_LINE}}; _objstash objstash '{}' '{}'; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            words.join(" "),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out =
            Command::new("bash").arg("-c").arg(program).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("bash: {}", stderr(&out)));
        }
        Ok(stdout(&out).lines().map(str::to_string).collect())
    };
    assert_eq!(complete("objstash imp")?, ["import"]);
    assert_eq!(complete("objstash --du")?, ["--durability"]);
    assert!(complete("objstash model ")?.iter().any(|w| w == "export"), "subcommands of model");
    Ok(())
}

#[test]
fn every_shell_s_script_and_the_man_page_name_every_command_and_need_no_stash() -> TestResult {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (out, dir) = run_without_a_stash(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let text = stdout(&out);
        for command in COMMANDS {
            assert!(text.contains(command), "{shell} names {command}");
        }
        assert!(text.contains("durability"), "{shell} names the flags");
        assert_eq!(std::fs::read_dir(dir.path())?.count(), 0, "nothing was made");
    }
    let (out, dir) = run_without_a_stash(&["man", "pages"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    let page = std::fs::read_to_string(dir.path().join("pages/objstash.1"))?;
    assert!(page.contains(".TH objstash 1"), "a section-1 page");
    for command in COMMANDS {
        assert!(page.contains(command), "the main page names {command}");
        // Each page the main one refers to is there.
        let sub = dir.path().join(format!("pages/objstash-{command}.1"));
        assert!(sub.exists(), "{} was written", sub.display());
        assert!(written.iter().any(|w| w.ends_with(&format!("objstash-{command}.1"))), "listed");
    }
    assert!(dir.path().join("pages/objstash-model-put.1").exists(), "pages of nested commands");
    let (out, _dir) = run_without_a_stash(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
    Ok(())
}
