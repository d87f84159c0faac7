//! The masker on generated text: it never panics, it keeps every line (a config error's line
//! number must still point at its line), it shows none of the secrets a generated config holds
//! however they are written, in TOML or JSON, parsed or not, and its time grows linearly with
//! adversarial input.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::masked;
use crate::config::SecretKeys;

fn mask(text: &str) -> String {
    masked(text, &SecretKeys::defaults().unwrap())
}

/// Text made of TOML's and JSON's punctuation, quotes, multi-line delimiters, URLs, header and
/// flag arguments, error gutters and words, over lines.
fn config_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(vec![
            "\"",
            "'",
            "\"\"\"",
            "'''",
            "=",
            " = ",
            "[",
            "]",
            "[[",
            "{",
            "}",
            ",",
            ".",
            ":",
            "#",
            "\\",
            "\n",
            "\r\n",
            "\r",
            " ",
            "env",
            "headers",
            "args",
            "token",
            "--header",
            "-H",
            "Authorization: ",
            "https://",
            "u:p@",
            "?a=1&b",
            "3 | ",
            "[upstreams.x]\n",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_-]{1,8}",
        "\\PC{1,3}",
    ];
    proptest::collection::vec(piece, 0..120).prop_map(|pieces| pieces.concat())
}

/// A secret: a marker no other part of a generated config holds.
fn secret() -> impl Strategy<Value = String> {
    "[a-z0-9]{8,12}".prop_map(|tail| format!("sk-{tail}"))
}

/// One upstream table `name` holding secret `s` in the `form`-th way TOML allows.
fn toml_upstream(name: &str, s: &str, form: usize) -> String {
    let body = match form % 16 {
        0 => format!("env = {{ KEY = \"{s}\", DEBUG = \"1\" }}\n"),
        1 => format!("env.KEY = \"{s}\"\n"),
        2 => format!("env.\"KEY\" = '''{s}'''\n"),
        3 => format!("env.CERT = \"\"\"\n-----\n{s}\n-----\"\"\"\n"),
        4 => format!("headers.\"X-Api-Key\" = \"{s}\"\n"),
        5 => format!("\"headers\".'X-Other' = '{s}'\n"),
        6 => format!("headers = {{ \"Authorization\" = \"Bearer {s}\" }}\n"),
        7 => format!("args = [\"--header\", \"Authorization: Bearer {s}\"]\n"),
        8 => format!("args = [\"-H\",\n  \"X-Api-Key:{s}\"]\n"),
        9 => format!("args = [\"x\", \"Cookie: a={s}\", \"--header=X-Token: {s}\"]\n"),
        10 => format!("url = \"https://{s}@mcp.example/mcp\"\n"),
        11 => format!("url = 'https://user:{s}@mcp.example/mcp?x=1'\n"),
        12 => format!("url = \"https://mcp.example/mcp?region=eu&api_key={s}\"\n"),
        13 => format!("args = [\"--api-key\", \"{s}\", \"--token={s}\", \"API_KEY={s}\"]\n"),
        14 => format!("client_secret = \"{s}\"\n"),
        _ => format!("[upstreams.{name}.env]\nNESTED = {{ A = [\"{s}\"] }}\n"),
    };
    format!("[upstreams.{name}]\ncommand = \"server\"\n{body}\n")
}

/// One `mcpServers` entry holding secret `s` in the `form`-th way.
fn json_server(s: &str, form: usize) -> serde_json::Value {
    use serde_json::json;
    match form % 8 {
        0 => json!({"command": "npx", "env": {"API_KEY": s, "DEBUG": "1"}}),
        1 => json!({"command": "npx", "env": {"NESTED": {"deep": [s]}}}),
        2 => {
            json!({"url": "https://mcp.example/mcp", "headers": {"Authorization": format!("Bearer {s}")}})
        }
        3 => json!({"command": "npx", "args": ["--header", format!("Authorization: Bearer {s}")]}),
        4 => json!({"command": "npx", "args": [format!("X-Api-Key: {s}"), "--api-key", s]}),
        5 => json!({"url": format!("https://user:{s}@mcp.example/mcp")}),
        6 => json!({"url": format!("https://mcp.example/mcp?token={s}&a=b")}),
        _ => {
            json!({"command": "npx", "args": [format!("--token={s}"), format!("postgres://{s}@db/x")]})
        }
    }
}

/// A config holding `secrets`, each written its own way: TOML, or JSON (pretty or on one line).
fn secret_config() -> impl Strategy<Value = (String, Vec<String>)> {
    let entries = proptest::collection::vec((secret(), any::<usize>()), 1..8);
    (entries, 0..3usize).prop_map(|(entries, format)| {
        let secrets = entries.iter().map(|(s, _)| s.clone()).collect();
        let text = match format {
            0 => (entries.iter().enumerate())
                .map(|(i, (s, form))| toml_upstream(&format!("u{i}"), s, *form))
                .collect::<String>(),
            _ => {
                let servers: serde_json::Map<String, serde_json::Value> = (entries.iter())
                    .enumerate()
                    .map(|(i, (s, form))| (format!("s{i}"), json_server(s, *form)))
                    .collect();
                let file = serde_json::json!({ "mcpServers": servers });
                match format {
                    1 => serde_json::to_string_pretty(&file).unwrap(),
                    _ => serde_json::to_string(&file).unwrap(),
                }
            }
        };
        (text, secrets)
    })
}

/// Asserts that `shown` has `text`'s lines, at the same numbers.
fn assert_lines_kept(text: &str, shown: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        shown.matches('\n').count(),
        text.matches('\n').count(),
        "{}",
        shown
    );
    prop_assert_eq!(shown.lines().count(), text.lines().count(), "{}", shown);
    Ok(())
}

proptest! {
    #[test]
    fn any_text_is_masked_without_a_panic_and_keeps_its_lines(text in "\\PC{0,300}") {
        assert_lines_kept(&text, &mask(&text))?;
    }

    #[test]
    fn config_like_text_keeps_its_lines(text in config_like()) {
        assert_lines_kept(&text, &mask(&text))?;
        let json = format!("{{{text}");
        assert_lines_kept(&json, &mask(&json))?;
    }

    #[test]
    fn a_generated_config_shows_none_of_its_secrets((text, secrets) in secret_config()) {
        let shown = mask(&text);
        for secret in &secrets {
            prop_assert!(!shown.contains(secret.as_str()), "{} shown:\n{}", secret, shown);
        }
        assert_lines_kept(&text, &shown)?;
        // Cut short (a file being written, an error quoting part of it), it shows none either.
        let cut = &text[..text.char_indices().nth(text.len() * 2 / 3).map_or(0, |(i, _)| i)];
        let shown = mask(cut);
        for secret in &secrets {
            prop_assert!(!shown.contains(secret.as_str()), "{} shown:\n{}", secret, shown);
        }
    }
}

/// How much larger the large input of each adversarial pair is.
const SCALE: usize = 8;

/// How much more than [`SCALE`] times longer the large input may take: room for noise, far
/// below the [`SCALE`]² of a quadratic scan.
const SLACK: u32 = 3;

/// Makes an adversarial input of `n` repetitions of its piece.
type Make = fn(usize) -> String;

/// Inputs a careless scanner rescans: what each is, and how it is made.
fn adversarial() -> Vec<(&'static str, Make)> {
    vec![
        ("unclosed quotes", |n| "\"".repeat(n)),
        ("keys without values", |n| "a = \"".repeat(n)),
        ("equals signs", |n| format!("a{}", "=".repeat(n))),
        ("multi-line delimiters", |n| {
            format!("a = {}", "\"\"\" ".repeat(n))
        }),
        ("an open multi-line string", |n| {
            format!("a = '''\n{}", "x\n".repeat(n))
        }),
        ("URLs in a URL", |n| {
            format!("a = \"{}\"", "h://u@h?q=1&".repeat(n))
        }),
        ("error gutters", |n| "1 | ".repeat(n)),
        ("open brackets", |n| "[".repeat(n)),
        ("open braces", |n| format!("a = {}", "{ b = ".repeat(n))),
        ("a long dotted key", |n| {
            format!("{}a = 1\n", "a.".repeat(n))
        }),
        ("many tables", |n| {
            (0..n).map(|i| format!("[t.t{i}]\nk = \"v\"\n")).collect()
        }),
        ("many header arguments", |n| {
            format!("[u]\nargs = [{}]\n", "\"--header\", \"A: b\", ".repeat(n))
        }),
        ("deep JSON", |n| {
            format!("{}1{}", "{\"env\":".repeat(n), "}".repeat(n))
        }),
        ("deep JSON arrays", |n| {
            format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n))
        }),
        ("many JSON servers", |n| {
            let servers: Vec<String> = (0..n)
                .map(|i| {
                    format!("\"s{i}\": {{\"env\": {{\"K\": \"v\"}}, \"args\": [\"-H\", \"A: b\"]}}")
                })
                .collect();
            format!("{{\"mcpServers\": {{{}}}}}", servers.join(",\n"))
        }),
        ("broken JSON", |n| {
            format!("{{{}", "\"a\": \"b\", \"c".repeat(n))
        }),
    ]
}

/// The least time of a few runs of masking `text`: the one least disturbed by whatever else
/// the machine runs.
fn fastest(text: &str) -> Duration {
    fastest_of(&[text])[0]
}

/// The least time of masking each of `texts`, timed in turns (a burst of other work on the
/// machine slows one turn of each, not every turn of one), seven turns.
fn fastest_of(texts: &[&str]) -> Vec<Duration> {
    let keys = SecretKeys::defaults().unwrap();
    let mut least = vec![Duration::MAX; texts.len()];
    for _ in 0..7 {
        for (text, least) in texts.iter().zip(&mut least) {
            let start = Instant::now();
            std::hint::black_box(masked(text, &keys));
            *least = (*least).min(start.elapsed());
        }
    }
    least
}

#[test]
fn masking_time_grows_linearly_with_adversarial_input() {
    for (what, make) in adversarial() {
        // A size whose small input takes long enough to time well (a few milliseconds).
        let mut n = 256;
        while fastest(&make(n)) < Duration::from_millis(2) && n < 1 << 16 {
            n *= 2;
        }
        let (small, large) = (make(n), make(n * SCALE));
        let times = fastest_of(&[&small, &large]);
        let (small_time, large_time) = (times[0], times[1]);
        let allowed = small_time * (SCALE as u32) * SLACK;
        assert!(
            large_time <= allowed,
            "{what}: {} bytes took {large_time:?}, {} bytes {small_time:?} (at most {allowed:?})",
            large.len(),
            small.len(),
        );
    }
}
