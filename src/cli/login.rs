//! `mcpmux login NAME`: the sign-in runs in the daemon; the CLI starts it, shows (or opens) the
//! authorization URL, and waits until the daemon says how it ended.

use super::admin::Admin;
use crate::api;

/// `mcpmux login NAME`: starts the sign-in in the daemon, shows where to go, waits for the end.
pub(super) async fn login(admin: &Admin, name: &str, browser: bool) -> anyhow::Result<()> {
    let path = format!("/upstreams/{}/login", super::admin::segment(name)?);
    let started: api::LoginStarted = admin.post(&path).await?;
    if let Some(url) = started.authorization_url.as_deref() {
        say(&format!(
            "Open this URL to sign in to upstream `{name}`:\n\n  {url}\n"
        ));
        if browser && open_browser(url) {
            say("(a browser was asked to open it)");
        }
        say("Waiting for the sign-in to finish…");
    }
    loop {
        let state: api::LoginState = admin.request(reqwest::Method::GET, &path, &[]).await?;
        match state {
            api::LoginState::Done => {
                say(&format!(
                    "Signed in to `{name}`; it restarts with its new tokens."
                ));
                return Ok(());
            }
            api::LoginState::Failed { error } => anyhow::bail!("{error}"),
            api::LoginState::None | api::LoginState::Pending { .. } => {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await
            }
        }
    }
}

/// What `mcpmux login|logout NAME --principal P` does.
pub(super) enum Act {
    Login,
    Logout,
}

/// `mcpmux login NAME --principal P`: prints a sign-in link for the principal (who opens it and
/// proves who they are there); `mcpmux logout NAME --principal P`: forgets its tokens.
pub(super) async fn principal(
    admin: &Admin,
    (name, principal, issuer): (&str, &str, Option<String>),
    act: Act,
) -> anyhow::Result<()> {
    let segment = super::admin::segment;
    let verb = match act {
        Act::Login => "login",
        Act::Logout => "logout",
    };
    let path = format!(
        "/upstreams/{}/principals/{}/{verb}",
        segment(name)?,
        segment(principal)?
    );
    let query: Vec<(&str, String)> = issuer.map(|i| ("issuer", i)).into_iter().collect();
    match act {
        Act::Login => {
            let made: api::PrincipalSignIn =
                admin.request(reqwest::Method::POST, &path, &query).await?;
            say(&format!(
                "Give {principal} this link to sign in to upstream `{name}` (it works once, within {} minutes; they prove who they are with their host's token first):\n\n  {}\n",
                made.expires_in_secs / 60,
                made.url
            ));
        }
        Act::Logout => {
            let out: api::PrincipalLoggedOut =
                admin.request(reqwest::Method::POST, &path, &query).await?;
            match out.revoked {
                true => say(&format!(
                    "Forgot {principal}'s sign-in to `{name}`; their next call asks them to sign in again."
                )),
                false => say(&format!("{principal} was not signed in to `{name}`.")),
            }
        }
    }
    Ok(())
}

/// Prints a line of a long-running command; a reader that went away is no reason to stop (or
/// to panic, as `println!` would).
fn say(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// Asks the desktop to open `url` (where there is a desktop); whether it agreed.
fn open_browser(url: &str) -> bool {
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if desktop {
        "xdg-open"
    } else {
        return false;
    };
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}
