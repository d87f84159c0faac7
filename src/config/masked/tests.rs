//! The masker's cases, one by one: TOML and `mcpServers` JSON that parse, text that does not.

#![allow(clippy::unwrap_used)]

use super::*;

fn mask(text: &str) -> String {
    masked(text, &SecretKeys::defaults().unwrap())
}

#[test]
fn env_values_and_secret_keys_are_masked_and_the_lines_kept() {
    let text = "[upstreams.github]\n\
        command = \"npx\"\n\
        args = [\"-y\", \"server-github\"]   # token = \"in a comment\"\n\
        env = { GITHUB_PERSONAL_ACCESS_TOKEN = \"ghp_abc\", DEBUG = \"1\" }\n\
        bearer_token_env = \"GITHUB_TOKEN\"\n\
        env.DATABASE_URL = \"postgres://inline\"\n\
        \n\
        [upstreams.db.env]\n\
        DATABASE_URL = 'postgres://me:pw@host/db'\n\
        \n\
        [upstreams.remote]\n\
        headers = { X-Api-Key = \"xk-1\" }\n\
        \n\
        [hosts.cursor]\n\
        api_key = \"k\\\"ey\" # inline\n\
        profile = \"dev\"\n";
    let shown = mask(text);
    assert_eq!(shown.lines().count(), text.lines().count());
    for secret in ["ghp_abc", "postgres://", "k\\\"ey", "xk-1"] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[3],
        "env = { GITHUB_PERSONAL_ACCESS_TOKEN = \"••••••\", DEBUG = \"••••••\" }"
    );
    assert_eq!(lines[5], "env.DATABASE_URL = \"••••••\"");
    assert_eq!(lines[8], "DATABASE_URL = '••••••'");
    assert_eq!(lines[11], "headers = { X-Api-Key = \"••••••\" }");
    assert_eq!(lines[14], "api_key = \"••••••\" # inline");
    // Kept: what is not a secret, a reference to one, and comments.
    assert_eq!(lines[1], "command = \"npx\"");
    assert!(lines[2].ends_with("# token = \"in a comment\""));
    assert_eq!(lines[4], "bearer_token_env = \"GITHUB_TOKEN\"");
    assert_eq!(lines[15], "profile = \"dev\"");
}

#[test]
fn secrets_in_args_and_url_passwords_are_masked() {
    let text = "[upstreams.a]\n\
        args = [\"-y\", \"server-x\", \"--api-key\", \"sk-live-1\", \"--token=tk-2\",\n\
        \"GITHUB_TOKEN=gh-3\", \"--token-file\", \"/run/tok\", \"--verbose\"]\n\
        [upstreams.b]\n\
        args = ['--db', 'postgres://me:pw-4@db/x']\n\
        url = \"https://user:pw-5@example.com/mcp\"\n\
        allowed = [\"--password\"]\n\
        other = \"plain\"\n";
    let shown = mask(text);
    assert_eq!(shown.lines().count(), text.lines().count());
    for secret in ["sk-live-1", "tk-2", "gh-3", "pw-4", "pw-5"] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[1],
        "args = [\"-y\", \"server-x\", \"--api-key\", \"••••••\", \"--token=••••••\","
    );
    // The array goes on on the next line; a reference to a secret file is kept.
    assert_eq!(
        lines[2],
        "\"GITHUB_TOKEN=••••••\", \"--token-file\", \"/run/tok\", \"--verbose\"]"
    );
    // A URL's userinfo, user and all (a user name can be a token: `https://ghp_…@github.com`).
    assert_eq!(lines[4], "args = ['--db', 'postgres://••••••@db/x']");
    assert_eq!(lines[5], "url = \"https://••••••@example.com/mcp\"");
    assert_eq!(
        lines[6], "allowed = [\"--password\"]",
        "only args take values"
    );
    assert_eq!(lines[7], "other = \"plain\"");
}

/// Asserts that no secret of `secrets` is in `shown`, and that it has `text`'s lines.
fn assert_hidden(text: &str, shown: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    assert_eq!(shown.lines().count(), text.lines().count(), "{shown}");
}

#[test]
fn an_mcp_servers_json_file_shows_no_env_header_url_or_arg_secret() {
    let text = r#"{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "server-github", "--header", "Authorization: Bearer sk-arg-1",
               "X-Api-Key: sk-arg-2", "--api-key", "sk-arg-3", "--token=sk-arg-4"],
      "env": {"GITHUB_TOKEN": "ghp_env_5", "DEBUG": "1", "NESTED": {"deep": ["sk-env-6"]}}
    },
    "remote": {
      "type": "http",
      "url": "https://me:sk-pass-7@mcp.example/mcp?api_key=sk-query-8&region=eu",
      "headers": {"Authorization": "Bearer sk-header-9", "X-Escaped": "sk-\"10\""}
    }
  },
  "api_key": "sk-top-11"
}
"#;
    let shown = mask(text);
    assert_hidden(
        text,
        &shown,
        &[
            "sk-arg-1",
            "sk-arg-2",
            "sk-arg-3",
            "sk-arg-4",
            "ghp_env_5",
            "sk-env-6",
            "me:",
            "sk-pass-7",
            "sk-query-8",
            "eu",
            "sk-header-9",
            "10",
            "sk-top-11",
        ],
    );
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[3], r#"      "command": "npx","#);
    assert_eq!(
        lines[4],
        r#"      "args": ["-y", "server-github", "--header", "Authorization: ••••••","#
    );
    assert_eq!(
        lines[5],
        r#"               "X-Api-Key: ••••••", "--api-key", "••••••", "--token=••••••"],"#
    );
    assert!(lines[6].contains(r#""DEBUG": "••••••""#), "{shown}");
    assert!(lines[9].contains(r#""type": "http""#), "{shown}");
    assert_eq!(
        lines[10],
        r#"      "url": "https://••••••@mcp.example/mcp?api_key=••••••&region=••••••","#
    );
}

#[test]
fn header_arguments_are_masked_after_their_flag_or_by_their_shape() {
    let text = r#"[upstreams.remote]
command = "npx"
args = ["mcp-remote", "https://mcp.example/sse", "--header", "Authorization: Bearer sk-1",
"-H", "X-Api-Key:sk-2", "Cookie: session=sk-3", "--header=X-Token: sk-4", "localhost:8080"]
"#;
    let shown = mask(text);
    assert_hidden(text, &shown, &["sk-1", "sk-2", "sk-3", "sk-4"]);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[2],
        r#"args = ["mcp-remote", "https://mcp.example/sse", "--header", "Authorization: ••••••","#
    );
    assert_eq!(
        lines[3],
        r#""-H", "X-Api-Key:••••••", "Cookie: ••••••", "--header=X-Token: ••••••", "localhost:8080"]"#
    );
}

/// A file cut short inside a URL's authority (being written, or quoted in part by an error):
/// what is there may be the start of its userinfo, and is not shown.
#[test]
fn a_url_cut_inside_its_authority_is_masked() {
    let text = "[upstreams.u4]\ncommand = \"server\"\nurl = \"https://sk-aaaaa000a0";
    let shown = mask(text);
    assert_hidden(text, &shown, &["sk-aaaaa000a0"]);
}

#[test]
fn a_url_shows_neither_its_userinfo_nor_its_query_values() {
    let text = r#"[upstreams.remote]
url = "https://user:sk-1@mcp.example/mcp?api_key=sk-2&token=sk-3#part"
[upstreams.db]
command = "db-server"
args = ["--db", 'postgres://ghp_sk-4@db/x?password=sk-5']
"#;
    let shown = mask(text);
    assert_hidden(
        text,
        &shown,
        &["user", "sk-1", "sk-2", "sk-3", "ghp_sk-4", "sk-5"],
    );
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[1],
        r#"url = "https://••••••@mcp.example/mcp?api_key=••••••&token=••••••#part""#
    );
    assert!(
        lines[4].contains("postgres://••••••@db/x?password=••••••"),
        "{shown}"
    );
}

#[test]
fn multi_line_strings_in_env_are_masked_and_their_lines_kept() {
    let text = r#"[upstreams.a]
command = "server"
env.CERT = """
-----BEGIN KEY-----
sk-1
-----END KEY-----"""
env.OTHER = '''sk-2
sk-3'''
after = "kept"
[upstreams.a.env]
CONT = """sk-4 \
  sk-5"""
"#;
    let shown = mask(text);
    assert_hidden(
        text,
        &shown,
        &["BEGIN", "sk-1", "sk-2", "sk-3", "sk-4", "sk-5"],
    );
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[1], r#"command = "server""#);
    assert_eq!(lines[8], r#"after = "kept""#, "{shown}");
}

#[test]
fn env_and_headers_values_are_masked_however_their_keys_are_written() {
    let text = r#"[upstreams.remote]
url = "https://mcp.example/mcp"
headers."X-Api-Key" = "sk-1"
"headers".'X-Other' = "sk-2"
headers . "X.Dotted" = "sk-3"
[upstreams."remote two"."headers"]
"Authorization" = "Bearer sk-4"
[upstreams.x]
env = { A = { B = "sk-5" }, C = ["sk-6", 7] }
port = 8080
"#;
    let shown = mask(text);
    assert_hidden(
        text,
        &shown,
        &["sk-1", "sk-2", "sk-3", "sk-4", "sk-5", "sk-6", "7]"],
    );
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[2], r#"headers."X-Api-Key" = "••••••""#);
    assert_eq!(lines[9], "port = 8080");
}

#[test]
fn a_toml_error_quoting_a_secret_is_masked() {
    let error = "mcpmux.toml: TOML parse error at line 3, column 5\n  |\n3 | env = { KEY = \"sk-2\" \n  |     ^\n";
    let shown = mask(error);
    assert!(!shown.contains("sk-2"), "{shown}");
    assert!(shown.contains("3 | env = { KEY = \"••••••\" "), "{shown}");
}

#[test]
fn a_file_that_does_not_parse_is_masked_all_the_same() {
    let shown = mask("[upstreams.x]\ncommand = 5\nenv = { KEY = \"sk-1\"\npassword = \"pw\n");
    assert!(
        !shown.contains("sk-1") && !shown.contains("\"pw"),
        "{shown}"
    );
    assert!(shown.contains("command = 5"));
}
