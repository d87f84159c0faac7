use proptest::prelude::*;

use super::parse;

fn path() -> std::path::PathBuf {
    std::env::temp_dir().join("mcpmux-config-properties/mcpmux.toml")
}

/// A TOML config with upstreams named `names` (commands and args of any text), optionally a
/// host and a profile naming the first upstream.
fn config() -> impl Strategy<Value = (Vec<String>, String)> {
    let upstream = (
        "[a-z][a-z0-9-]{0,10}",
        "\\PC{1,20}",
        proptest::collection::vec("\\PC{0,10}", 0..3),
    );
    (proptest::collection::vec(upstream, 1..5), any::<bool>(), "[0-9a-f]{64}").prop_map(
        |(upstreams, with_host, digest)| {
            let mut names = Vec::new();
            let mut prefixes = Vec::new();
            let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\n\n");
            for (name, command, args) in upstreams {
                // Two names with one prefix (`r`, `r-`) are a config error, rightly refused.
                let prefix = crate::mcp::names::Prefix::derive(&name).ok();
                if names.contains(&name) || prefixes.contains(&prefix) {
                    continue;
                }
                prefixes.push(prefix);
                let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
                text += &format!(
                    "[upstreams.{name}]\ncommand = {}\nargs = [{}]\n\n",
                    toml_str(&command),
                    args.join(", ")
                );
                names.push(name);
            }
            if with_host {
                text += &format!(
                    "[profiles.some]\nupstreams = [{}]\n\n[hosts.h]\ntoken_sha256 = \"{digest}\"\nprofile = \"some\"\n",
                    toml_str(&names[0])
                );
            }
            (names, text)
        },
    )
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

proptest! {
    #[test]
    fn any_text_is_parsed_or_refused_without_a_panic(text in "\\PC{0,300}") {
        if let Err(e) = parse(&path(), &text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn any_json_text_is_parsed_or_refused_without_a_panic(text in "\\{\\PC{0,200}") {
        let _ = parse(&path(), &text);
    }

    #[test]
    fn a_generated_config_keeps_its_upstreams((names, text) in config()) {
        match parse(&path(), &text) {
            Ok(config) => {
                let got: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
                let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut got_sorted = got.clone();
                got_sorted.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(got_sorted, want);
            }
            // A command of blank text is refused; nothing else should be.
            Err(e) => prop_assert!(e.to_string().contains("command"), "{}\n{}", text, e),
        }
    }

    #[test]
    fn a_config_with_one_key_broken_names_it(
        (_, text) in config(),
        key in proptest::sample::select(vec!["command", "listen", "token_sha256", "upstreams"]),
    ) {
        // The value of the first occurrence of `key` becomes a number: the error must name a key.
        let Some(at) = text.find(&format!("{key} = ")) else { return Ok(()); };
        let start = at + key.len() + 3;
        let end = text[start..].find('\n').map_or(text.len(), |n| start + n);
        let broken = format!("{}12345{}", &text[..start], &text[end..]);
        if let Err(e) = parse(&path(), &broken) {
            prop_assert!(e.to_string().contains(key) || e.to_string().contains("invalid type"), "{}", e);
        }
    }
}
