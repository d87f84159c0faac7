//! `[hosts.NAME.upstreams.UP]`: a host's own identity toward an upstream that gives each
//! principal its own (`credentials = "per-principal"` or `isolation = "per-principal"`) — a
//! remote upstream's bearer token and headers, a stdio upstream's environment. And the rule that
//! makes "each principal its own" hold: no view a caller without a credential reaches holds such
//! an upstream (an anonymous caller is no principal).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::super::error::ConfigError;
use super::super::model::{
    Authorization, HostCredential, Isolation, Profile, UpstreamConfig, UpstreamSecrets,
};
use super::super::raw::RawHostUpstream;
use super::super::transport::{TokenSource, Transport};
use super::resolve;

/// The tables of host `host`, by upstream name: each names a per-principal upstream and holds
/// only what its transport takes.
pub(super) fn secrets(
    file: &Path,
    base_dir: &Path,
    host: &str,
    raw: BTreeMap<String, RawHostUpstream>,
    upstreams: &[UpstreamConfig],
) -> Result<BTreeMap<String, Arc<UpstreamSecrets>>, ConfigError> {
    let mut secrets = BTreeMap::new();
    for (name, r) in raw {
        let table = format!("hosts.{host}.upstreams.{name}");
        fits(file, &table, &name, &r, upstreams)?;
        let entry = read(file, base_dir, &table, r)?;
        secrets.insert(name, Arc::new(entry));
    }
    Ok(secrets)
}

/// Whether the table `table` names a per-principal upstream and sets only what its transport
/// takes.
fn fits(
    file: &Path,
    table: &str,
    name: &str,
    r: &RawHostUpstream,
    upstreams: &[UpstreamConfig],
) -> Result<(), ConfigError> {
    let Some(upstream) = upstreams.iter().find(|u| u.name == name) else {
        let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
        return Err(ConfigError::invalid(
            file,
            table,
            format!("names no upstream `{name}`"),
            format!("name one of [upstreams]: {}", known.join(", ")),
        ));
    };
    if upstream.isolation != Isolation::PerPrincipal {
        return Err(ConfigError::invalid(
            file,
            table,
            format!(
                "gives this host its own identity toward `{name}`, but every caller of `{name}` shares one"
            ),
            format!(
                "set credentials = \"per-principal\" in [upstreams.{name}], or remove this table"
            ),
        ));
    }
    let remote_keys =
        r.bearer_token_env.is_some() || r.bearer_token_file.is_some() || !r.headers.is_empty();
    let stdio_keys = !(r.env.is_empty() && r.env_from_env.is_empty() && r.env_from_file.is_empty());
    match &upstream.transport {
        Transport::Stdio(_) if remote_keys => Err(ConfigError::invalid(
            file,
            table,
            format!("sets a bearer token or headers, but `{name}` is a process (stdio)"),
            "give a stdio upstream's principal env, env_from_env or env_from_file",
        )),
        Transport::Remote(_) if stdio_keys => Err(ConfigError::invalid(
            file,
            table,
            format!("sets environment variables, but `{name}` is a remote server"),
            "give a remote upstream's principal bearer_token_file, bearer_token_env or headers",
        )),
        _ => Ok(()),
    }
}

/// The secrets' sources of one table (files relative to the config), each variable set in one
/// place.
fn read(
    file: &Path,
    base_dir: &Path,
    table: &str,
    r: RawHostUpstream,
) -> Result<UpstreamSecrets, ConfigError> {
    let key = |field: &str| format!("{table}.{field}");
    super::transport::headers(file, &key, &r.headers)?;
    let bearer_token = super::transport::bearer_token(
        (file, base_dir),
        &key,
        r.bearer_token_env,
        r.bearer_token_file,
    )?;
    let mut env_secrets = BTreeMap::new();
    for (var, from) in r.env_from_env {
        env_secrets.insert(var, TokenSource::Env(from));
    }
    for (var, path) in r.env_from_file {
        if env_secrets.contains_key(&var) {
            return Err(ConfigError::invalid(
                file,
                key("env_from_file"),
                format!("sets {var}, which env_from_env sets too"),
                "set each variable in one place",
            ));
        }
        env_secrets.insert(var, TokenSource::File(resolve(base_dir, path)));
    }
    if let Some(var) = (r.env.keys()).find(|v| env_secrets.contains_key(*v)) {
        return Err(ConfigError::invalid(
            file,
            key("env"),
            format!("sets {var}, which env_from_env or env_from_file sets too"),
            "set each variable in one place",
        ));
    }
    Ok(UpstreamSecrets {
        table: table.to_owned(),
        bearer_token,
        headers: r.headers,
        env: r.env,
        env_secrets,
        oauth: None,
    })
}

/// Refuses a per-principal upstream in a view a loopback caller without a credential reaches:
/// with no `[hosts]` and no `[server.authorization]`, every view; otherwise
/// `server.anonymous_profile` and the paths of `anonymous = true` profiles.
pub(super) fn none_anonymous(
    file: &Path,
    upstreams: &[UpstreamConfig],
    profiles: &[Profile],
    hosts: &[HostCredential],
    authorization: Option<&Authorization>,
    anonymous_profile: Option<&str>,
) -> Result<(), ConfigError> {
    let Some(upstream) = (upstreams.iter()).find(|u| u.isolation == Isolation::PerPrincipal) else {
        return Ok(());
    };
    let open = hosts.is_empty() && authorization.is_none();
    let holds =
        |p: &Profile| (p.upstreams.as_ref()).is_none_or(|names| names.contains(&upstream.name));
    let view = match anonymous_profile {
        _ if open && anonymous_profile.is_none() => Some("/mcp (the whole catalog)".to_owned()),
        Some(name) => (profiles.iter())
            .find(|p| p.name == name && holds(p))
            .map(|p| format!("/mcp (server.anonymous_profile {})", p.name)),
        None => None,
    }
    .or_else(|| {
        (profiles.iter())
            .find(|p| p.path && (open || p.anonymous) && holds(p))
            .map(|p| format!("/mcp/{} (profile {})", p.name, p.name))
    });
    let Some(view) = view else {
        return Ok(());
    };
    let name = &upstream.name;
    Err(ConfigError::invalid(
        file,
        format!("upstreams.{name}"),
        format!(
            "gives each principal its own identity, but {view} reaches it without a credential, as no principal"
        ),
        format!(
            "configure [hosts] (or [server.authorization]) so callers are known, or leave `{name}` out of that view's upstreams"
        ),
    ))
}

/// A `grant = "token_exchange"` upstream exchanges callers' JWTs: some host must sign in with one
/// (`[server.authorization]`, or a `[hosts.NAME]` with `subject`), else every call would fail.
pub(super) fn some_jwt_to_exchange(
    file: &Path,
    upstreams: &[UpstreamConfig],
    hosts: &[HostCredential],
    authorization: Option<&Authorization>,
) -> Result<(), ConfigError> {
    let jwt_hosts = authorization.is_some()
        || (hosts.iter()).any(|h| matches!(h.credential, crate::config::Credential::Jwt { .. }));
    let exchanging = (upstreams.iter()).find(|u| match &u.transport {
        Transport::Remote(r) => (r.oauth.as_deref())
            .is_some_and(|o| o.grant == crate::config::OAuthGrant::TokenExchange),
        Transport::Stdio(_) => false,
    });
    match exchanging {
        Some(upstream) if !jwt_hosts => Err(ConfigError::invalid(
            file,
            format!("upstreams.{}.oauth.grant", upstream.name),
            "is token_exchange, which exchanges each caller's JWT, but no host signs in with a JWT",
            "configure [server.authorization] (or a [hosts.NAME] with subject and its issuer) so callers bring JWTs, or use another grant",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Isolation, TokenSource, Transport, parse};

    const ALICE: &str = "[hosts.alice]\ntoken_sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n";

    fn error(text: &str) -> String {
        match parse(Path::new("/etc/mcpmux/t.toml"), text) {
            Ok(_) => panic!("loaded:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_hosts_own_identity_is_read_for_its_transport() {
        let text = format!(
            "{ALICE}[hosts.alice.upstreams.gh]\nbearer_token_file = \"alice.token\"\nheaders = {{ X-User = \"alice\" }}\n\
             [hosts.alice.upstreams.db]\nenv = {{ A = \"1\" }}\nenv_from_env = {{ B = \"ALICE_B\" }}\nenv_from_file = {{ C = \"c.txt\" }}\n\
             [upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n\
             [upstreams.db]\ncommand = \"db\"\nisolation = \"per-principal\"\nmax_instances = 3\n\
             [upstreams.plain]\ncommand = \"x\"\n"
        );
        let config =
            parse(Path::new("/etc/mcpmux/t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let isolation = |n: &str| {
            config
                .upstreams
                .iter()
                .find(|u| u.name == n)
                .unwrap_or_else(|| panic!("no upstream {n}"))
                .isolation
        };
        assert_eq!(isolation("gh"), Isolation::PerPrincipal);
        assert_eq!(isolation("db"), Isolation::PerPrincipal);
        assert_eq!(isolation("plain"), Isolation::Shared);
        let own = &config.hosts[0].upstreams;
        assert_eq!(
            own["gh"].bearer_token,
            Some(TokenSource::File("/etc/mcpmux/alice.token".into()))
        );
        assert_eq!(own["gh"].headers["X-User"], "alice");
        assert_eq!(own["db"].env["A"], "1");
        assert_eq!(
            own["db"].env_secrets["B"],
            TokenSource::Env("ALICE_B".into())
        );
        assert_eq!(
            own["db"].env_secrets["C"],
            TokenSource::File("/etc/mcpmux/c.txt".into())
        );
        // Nothing of the secrets in a debug print.
        let printed = format!("{:?}", own["gh"]);
        assert!(
            !printed.contains("alice.token") && !printed.contains("\"alice\""),
            "{printed}"
        );
    }

    #[test]
    fn applied_secrets_replace_the_upstreams_own_sign_in() {
        let text = format!(
            "{ALICE}[hosts.alice.upstreams.gh]\nbearer_token_env = \"ALICE_GH\"\n\
             [upstreams.gh]\nurl = \"https://example.com/mcp\"\nbearer_token_env = \"SHARED\"\nheaders = {{ X-A = \"1\" }}\ncredentials = \"per-principal\"\n"
        );
        let config =
            parse(Path::new("/etc/mcpmux/t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let mut upstream = config.upstreams[0].clone();
        config.hosts[0].upstreams["gh"]
            .apply(&mut upstream)
            .unwrap_or_else(|e| panic!("{e}"));
        let Transport::Remote(remote) = &upstream.transport else {
            panic!("remote")
        };
        assert_eq!(
            remote.bearer_token,
            Some(TokenSource::Env("ALICE_GH".into()))
        );
        assert_eq!(remote.headers["X-A"], "1");
        assert!(remote.oauth.is_none());
    }

    #[test]
    fn an_unreadable_secret_names_its_table_and_variable() {
        let text = format!(
            "{ALICE}[hosts.alice.upstreams.db]\nenv_from_file = {{ TOKEN = \"/nonexistent/mcpmux-test\" }}\n\
             [upstreams.db]\ncommand = \"db\"\ncredentials = \"per-principal\"\n"
        );
        let config =
            parse(Path::new("/etc/mcpmux/t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let mut upstream = config.upstreams[0].clone();
        let e = config.hosts[0].upstreams["db"]
            .apply(&mut upstream)
            .err()
            .unwrap_or_else(|| panic!("an unreadable file was read"));
        assert!(
            e.contains("hosts.alice.upstreams.db")
                && e.contains("TOKEN")
                && e.contains("/nonexistent/mcpmux-test"),
            "{e}"
        );
    }

    #[test]
    fn a_per_principal_upstream_is_never_reachable_without_a_credential() {
        let upstream = "[upstreams.db]\ncommand = \"db\"\ncredentials = \"per-principal\"\n";
        let e = error(upstream);
        assert!(
            e.contains("`upstreams.db`")
                && e.contains("/mcp (the whole catalog)")
                && e.contains("Fix: configure [hosts]"),
            "{e}"
        );
        // With hosts, /mcp needs a credential; an anonymous profile that holds it does not.
        let e = error(&format!(
            "[server]\nanonymous_profile = \"open\"\n{ALICE}[profiles.open]\n{upstream}"
        ));
        assert!(e.contains("server.anonymous_profile open"), "{e}");
        let e = error(&format!(
            "{ALICE}[profiles.open]\npath = true\nanonymous = true\nupstreams = [\"db\"]\n{upstream}"
        ));
        assert!(e.contains("/mcp/open"), "{e}");
        // A view without it may be anonymous.
        let fine = format!(
            "[server]\nanonymous_profile = \"open\"\n{ALICE}[profiles.open]\nupstreams = [\"other\"]\n{upstream}[upstreams.other]\ncommand = \"x\"\n"
        );
        parse(Path::new("/t.toml"), &fine).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_hosts_table_must_fit_its_upstream() {
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.nope]\nenv = {{ A = \"1\" }}\n[upstreams.db]\ncommand = \"db\"\n"
        ));
        assert!(
            e.contains("hosts.alice.upstreams.nope") && e.contains("name one of [upstreams]: db"),
            "{e}"
        );
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.db]\nenv = {{ A = \"1\" }}\n[upstreams.db]\ncommand = \"db\"\n"
        ));
        assert!(
            e.contains("every caller of `db` shares one")
                && e.contains("credentials = \"per-principal\" in [upstreams.db]"),
            "{e}"
        );
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.db]\nbearer_token_env = \"T\"\n[upstreams.db]\ncommand = \"db\"\ncredentials = \"per-principal\"\n"
        ));
        assert!(e.contains("is a process (stdio)"), "{e}");
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.gh]\nenv = {{ A = \"1\" }}\n[upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n"
        ));
        assert!(e.contains("is a remote server"), "{e}");
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.gh]\nbearer_token_env = \"T\"\nbearer_token_file = \"t\"\n[upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n"
        ));
        assert!(
            e.contains("hosts.alice.upstreams.gh.bearer_token_file"),
            "{e}"
        );
        let e = error(&format!(
            "{ALICE}[hosts.alice.upstreams.gh]\ntoken = \"T\"\n[upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n"
        ));
        assert!(e.contains("token"), "{e}");
    }

    #[test]
    fn a_per_principal_upstream_signs_each_principal_in_never_mcpmux_itself() {
        let upstream = "[upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n[upstreams.gh.oauth]\n";
        let e = error(&format!(
            "{ALICE}{upstream}grant = \"client_credentials\"\nclient_id = \"x\"\nissuer = \"https://as.example.com\"\nclient_secret_env = \"S\"\n"
        ));
        assert!(
            e.contains("upstreams.gh.oauth.grant") && e.contains("authorization_code"),
            "{e}"
        );
        let config = parse(
            Path::new("/etc/mcpmux/t.toml"),
            &format!("{ALICE}{upstream}client_id = \"x\"\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let Transport::Remote(remote) = &config.upstreams[0].transport else {
            panic!("remote")
        };
        let oauth = remote
            .oauth
            .as_deref()
            .unwrap_or_else(|| panic!("no oauth"));
        assert!(oauth.written && oauth.grant == crate::config::OAuthGrant::AuthorizationCode);
        assert_eq!(config.upstreams[0].isolation, Isolation::PerPrincipal);
    }

    #[test]
    fn token_exchange_is_each_principals_and_names_its_exchange() {
        let upstream =
            "[upstreams.gh]\nurl = \"https://example.com/mcp\"\nbearer_token_env = \"CATALOG\"\n";
        let oauth = "[upstreams.gh.oauth]\ngrant = \"token_exchange\"\nissuer = \"https://idp.example.com\"\nclient_id = \"mcpmux\"\nclient_secret_env = \"S\"\n";
        let per_principal = format!("{upstream}credentials = \"per-principal\"\n{oauth}");
        // Only static-token hosts: nobody brings a JWT to exchange.
        let e = error(&format!("{ALICE}{per_principal}"));
        assert!(
            e.contains("upstreams.gh.oauth.grant") && e.contains("no host signs in with a JWT"),
            "{e}"
        );
        let jwt = "[server.authorization]\nissuer = \"https://idp.example.com\"\njwks_url = \"https://idp.example.com/jwks\"\n";
        let fine = format!("{jwt}{ALICE}{per_principal}");
        let config = parse(Path::new("/t.toml"), &fine).unwrap_or_else(|e| panic!("{e}"));
        let Transport::Remote(remote) = &config.upstreams[0].transport else {
            panic!("remote")
        };
        assert!(remote.bearer_token.is_some() && remote.oauth.is_some());
        let e = error(&format!("{ALICE}{upstream}{oauth}"));
        assert!(
            e.contains("upstreams.gh.oauth.grant") && e.contains("credentials = \"per-principal\""),
            "{e}"
        );
        let e = error(&format!(
            "{ALICE}[upstreams.gh]\nurl = \"https://example.com/mcp\"\ncredentials = \"per-principal\"\n[upstreams.gh.oauth]\ngrant = \"token_exchange\"\n"
        ));
        assert!(
            e.contains("token_exchange without client_id and issuer"),
            "{e}"
        );
    }

    #[test]
    fn a_workloads_jwt_grant_names_what_it_needs() {
        let remote = "[upstreams.r]\nurl = \"https://example.com/mcp\"\n[upstreams.r.oauth]\n";
        let fine = format!(
            "{remote}grant = \"jwt_bearer\"\nissuer = \"https://auth.example.com\"\nclient_id = \"w\"\nassertion_file = \"w.jwt\"\n"
        );
        let config =
            parse(Path::new("/etc/mcpmux/t.toml"), &fine).unwrap_or_else(|e| panic!("{e}"));
        let Transport::Remote(remote_config) = &config.upstreams[0].transport else {
            panic!("remote")
        };
        let oauth = remote_config
            .oauth
            .as_deref()
            .unwrap_or_else(|| panic!("no oauth"));
        assert_eq!(
            oauth.assertion,
            Some(TokenSource::File("/etc/mcpmux/w.jwt".into()))
        );
        let e = error(&format!(
            "{remote}grant = \"jwt_bearer\"\nclient_id = \"w\"\nassertion_env = \"J\"\n"
        ));
        assert!(
            e.contains("upstreams.r.oauth.grant") && e.contains("issuer"),
            "{e}"
        );
        let e = error(&format!("{remote}assertion_env = \"J\"\n"));
        assert!(
            e.contains("upstreams.r.oauth.assertion_file") && e.contains("jwt_bearer"),
            "{e}"
        );
    }

    #[test]
    fn identity_assertion_names_its_identity_provider_and_the_id_token() {
        let remote = "[upstreams.r]\nurl = \"https://example.com/mcp\"\n[upstreams.r.oauth]\nclient_id = \"c\"\nclient_secret_env = \"S\"\nissuer = \"https://as.example.com\"\n";
        let jag = "grant = \"identity_assertion\"\nassertion_env = \"ID_TOKEN\"\n";
        let e = error(&format!("{remote}{jag}"));
        assert!(e.contains("upstreams.r.oauth.idp_token_endpoint"), "{e}");
        let e = error(&format!(
            "{remote}{jag}idp_token_endpoint = \"http://idp.example.com/token\"\n"
        ));
        assert!(e.contains("not an https URL"), "{e}");
        let config = parse(
            Path::new("/etc/mcpmux/t.toml"),
            &format!("{remote}{jag}idp_token_endpoint = \"https://idp.example.com/token\"\nidp_client_id = \"i\"\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let Transport::Remote(r) = &config.upstreams[0].transport else {
            panic!("remote")
        };
        let oauth = r.oauth.as_deref().unwrap_or_else(|| panic!("oauth"));
        let idp = oauth.idp.as_ref().unwrap_or_else(|| panic!("idp"));
        assert_eq!(idp.token_endpoint.as_str(), "https://idp.example.com/token");
        assert_eq!(idp.client_id.as_deref(), Some("i"));
        assert_eq!(oauth.assertion, Some(TokenSource::Env("ID_TOKEN".into())));
        let e = error(&format!(
            "{remote}idp_token_endpoint = \"https://idp.example.com/token\"\n"
        ));
        assert!(e.contains("not identity_assertion"), "{e}");
    }
}
