//! Shell completions and the man page come from the command line's own definition: the bash
//! script passes `bash -n` and completes every command; the man page is roff that groff reads
//! without a warning, naming them all.

use std::process::Command;

use crate::common;

const COMMANDS: [&str; 8] = [
    "serve",
    "stdio",
    "status",
    "tools",
    "audit",
    "pins",
    "approve",
    "completions",
];

fn mcpmux(args: &[&str]) -> String {
    let out = Command::new(common::MCPMUX).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_and_man_page_cover_every_command() {
    let script = mcpmux(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcpmux.bash");
    std::fs::write(&path, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    for command in COMMANDS {
        assert!(script.contains(command), "bash completion lacks {command}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(
            mcpmux(&["completions", shell]).contains("approve"),
            "{shell}"
        );
    }
    let page = mcpmux(&["man"]);
    assert!(page.contains(".TH mcpmux 1"), "{page}");
    // groff reads it without a warning.
    let mut groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-z", "-ww"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("this test needs groff: {e}"));
    std::io::Write::write_all(&mut groff.stdin.take().unwrap(), page.as_bytes()).unwrap();
    let rendered = groff.wait_with_output().unwrap();
    assert!(
        rendered.status.success() && rendered.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    for command in COMMANDS {
        assert!(page.contains(command), "the man page lacks {command}");
    }
    let refused = Command::new(common::MCPMUX)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("possible values"));
}
