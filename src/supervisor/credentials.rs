//! What the supervisor does about credentials: an unauthorized upstream whose
//! `bearer_token_file` changes starts again (looked at every [`CREDENTIAL_CHECK`]), and one
//! that needs an OAuth sign-in is renewed without a person where that can work.

use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::{Key, Slot, SupervisorMsg};
use crate::config::{TokenSource, Transport};
use crate::upstream::{Phase, UpstreamHandle};

/// How often an unauthorized upstream's token file is looked at.
pub(super) const CREDENTIAL_CHECK: Duration = Duration::from_secs(2);
/// Sign-ins renewed without a person (a refresh, the client credentials grant) per upstream
/// within [`RENEWAL_WINDOW`]; past that it waits for `mcpmux login` (no token storm).
const RENEWALS: usize = 3;
const RENEWAL_WINDOW: Duration = Duration::from_secs(600);

/// The file an upstream's bearer token is read from, if it has one.
pub(super) fn token_file(handle: &UpstreamHandle) -> Option<&std::path::Path> {
    match &handle.config().transport {
        Transport::Remote(remote) => match &remote.bearer_token {
            Some(TokenSource::File(path)) => Some(path),
            _ => None,
        },
        Transport::Stdio(_) => None,
    }
}

/// Renews the sign-in of an upstream that needs one, where no person is needed (a refresh
/// token, unless the server wants wider scopes; the client credentials grant), at most
/// [`RENEWALS`] times per [`RENEWAL_WINDOW`]. New tokens start it again; a refused renewal
/// leaves it in `needs-login`, saying why.
pub(super) fn renew(myself: &ActorRef<SupervisorMsg>, slot: &mut Slot, key: Key) {
    if slot.handle.oauth().is_none() {
        return;
    }
    let now = Instant::now();
    slot.renewals
        .retain(|t| now.duration_since(*t) <= RENEWAL_WINDOW);
    if slot.renewals.len() >= RENEWALS {
        return;
    }
    slot.renewals.push_back(now);
    let login = match slot.handle.sign_in() {
        Some(Ok(login)) => login,
        Some(Err(e)) => {
            tracing::warn!(upstream = %key.upstream, error = %e, "Cannot renew its sign-in.");
            return;
        }
        None => return,
    };
    let handle = slot.handle.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        match login.renew().await {
            Ok(true) => {
                let _ = myself.send_message(SupervisorMsg::Renewed(key));
            }
            Ok(false) => {}
            Err(e) => {
                let name = &key.upstream;
                tracing::warn!(upstream = %name, error = %e, "Renewing its sign-in failed; it needs `mcpmux login {name}`.");
                let why = format!(
                    "it needs a sign-in: run `mcpmux login {name}` (renewing its tokens failed: {e})"
                );
                handle.set_phase(Phase::NeedsLogin, Some(why));
            }
        }
    });
}
