//! `mcpmux import HOST [PATH]`: sample configs of Claude Desktop, Claude Code, Cursor and VS Code
//! become mcpmux configs that `mcpmux check` accepts, with every stdio and remote server, and the
//! one replacing entry for that host printed; a host's usual path is found from `HOME`; an
//! existing output is not overwritten without `--force`.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn mcpmux(home: &Path, args: &[&str]) -> Output {
    Command::new(common::MCPMUX)
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(home)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const STDIO: &str = r#""memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "/tmp/memory.json"}}"#;
const REMOTE: &str = r#""docs": {"type": "http", "url": "https://docs.example.com/mcp", "headers": {"X-Team": "platform"}}"#;
const LEGACY: &str = r#""legacy": {"type": "sse", "url": "https://legacy.example.com/sse"}"#;

#[test]
fn each_hosts_config_becomes_an_mcpmux_config_and_one_entry() {
    let home = tempfile::tempdir().unwrap();
    let samples = [
        (
            "claude-desktop",
            ".config/Claude/claude_desktop_config.json",
            format!(r#"{{"mcpServers": {{{STDIO}, {REMOTE}, {LEGACY}}}, "globalShortcut": ""}}"#),
            "\"args\": [\"stdio\"]",
        ),
        (
            "claude-code",
            ".claude.json",
            format!(
                r#"{{"numStartups": 3, "mcpServers": {{{STDIO}, {REMOTE}, {LEGACY}}}, "projects": {{}}}}"#
            ),
            "claude mcp add --transport http mcpmux http://127.0.0.1:7332/mcp",
        ),
        (
            "cursor",
            ".cursor/mcp.json",
            format!(r#"{{"mcpServers": {{{STDIO}, {REMOTE}, {LEGACY}}}}}"#),
            "\"url\": \"http://127.0.0.1:7332/mcp\"",
        ),
        (
            "vscode",
            ".config/Code/User/mcp.json",
            format!(
                r#"{{"inputs": [], "servers": {{{}, {REMOTE}, {LEGACY}}}}}"#,
                STDIO.replace("{\"command\"", "{\"type\": \"stdio\", \"command\"")
            ),
            "\"type\": \"http\"",
        ),
    ];
    for (host, path, text, replacement) in samples {
        let file = home.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &text).unwrap();
        // --dry-run prints the config and the replacement.
        let printed = ok(&mcpmux(home.path(), &["import", host, "--dry-run"]));
        assert!(
            printed.contains("[upstreams.memory]") && printed.contains(replacement),
            "{host}: {printed}"
        );
        // Written to a file, `check` accepts it with all three servers.
        let output = home.path().join(format!("{host}.toml"));
        let said = ok(&mcpmux(
            home.path(),
            &["import", host, path, "--output", output.to_str().unwrap()],
        ));
        assert!(
            said.contains("3 servers") && said.contains(replacement),
            "{host}: {said}"
        );
        let table = ok(&mcpmux(
            home.path(),
            &["check", "--config", output.to_str().unwrap()],
        ));
        for (name, transport) in [
            ("memory", "stdio"),
            ("docs", "streamable-http"),
            ("legacy", "sse"),
        ] {
            assert!(
                table
                    .lines()
                    .any(|l| l.starts_with(name) && l.contains(transport)),
                "{host}: {name} {transport}\n{table}"
            );
        }
        // Not overwritten without --force.
        let again = mcpmux(
            home.path(),
            &["import", host, path, "--output", output.to_str().unwrap()],
        );
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
        ok(&mcpmux(
            home.path(),
            &[
                "import",
                host,
                path,
                "--output",
                output.to_str().unwrap(),
                "--force",
            ],
        ));
    }
    // Nothing where a host keeps its config: the error says where it looked.
    let empty = tempfile::tempdir().unwrap();
    let missing = mcpmux(empty.path(), &["import", "cursor"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains(".cursor/mcp.json"));
}
