//! A denied resource stays denied however its URI is spelled: a profile decides on the canonical
//! form (RFC 3986 §6.2.2: scheme and host case, unreserved percent-escapes, dot segments), on
//! `resources/read`, `resources/subscribe`, template admission and listings, and the `contents[]`
//! of a read answer are checked against the view too (an item it denies is dropped).

use crate::common::{Client, Daemon, test_upstream};
use serde_json::{Value, json};

/// `fs` serves `file:///` resources; `safe` denies `/etc`, `tmp` allows only `/tmp` (and
/// templates), both at their own path.
fn config() -> String {
    format!(
        "{}\n[profiles.safe]\npath = true\ndeny = [\"resource:fs+file:///etc/**\", \"template:fs+file:///etc/**\"]\n\
         [profiles.tmp]\npath = true\nallow = [\"resource:fs+file:///tmp/**\", \"template:fs+*\"]\n",
        test_upstream("fs", &["--files", "--protocol-tools"]),
    )
}

async fn start() -> Daemon {
    let daemon = Daemon::start(&config());
    let full = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&full, |n| n.iter().any(|t| t == "fs__echo"))
        .await;
    daemon
}

/// The spellings of `fs+file:///etc/passwd` a literal comparison does not recognize.
const DISGUISED: [&str; 6] = [
    "fs+file:///tmp/../etc/passwd",
    "fs+file:///tmp/./../etc/passwd",
    "fs+file:///tmp/%2E%2E/etc/passwd",
    "fs+file:///tmp/%2e%2e/etc/passwd",
    "fs+file:///%65tc/passwd",
    "fs+FILE:///etc/passwd",
];

fn refused_as_unknown(answer: &Value, uri: &str) {
    assert_eq!(answer["error"]["code"], -32002, "{uri}: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_resource_is_denied_however_its_uri_is_spelled() {
    let daemon = start().await;
    let safe = Client::connect(&format!("{}/safe", daemon.url)).await;
    let tmp = Client::connect(&format!("{}/tmp", daemon.url)).await;

    // What the profiles allow reads as before.
    let read = safe
        .result("resources/read", json!({"uri": "fs+file:///tmp/notes.txt"}))
        .await;
    assert_eq!(read["contents"][0]["text"], "read file:///tmp/notes.txt");
    let read = tmp
        .result("resources/read", json!({"uri": "fs+file:///tmp/sub/x.txt"}))
        .await;
    assert_eq!(read["contents"][0]["text"], "read file:///tmp/sub/x.txt");
    // A spelling of an allowed resource reads it, in its canonical form.
    let read = safe
        .result(
            "resources/read",
            json!({"uri": "fs+file:///tmp/sub/../%6Eotes.txt"}),
        )
        .await;
    assert_eq!(read["contents"][0]["text"], "read file:///tmp/notes.txt");

    // Denied, literally and in every disguise: by the deny glob in `safe`, by the allow glob and
    // the template `file:///tmp/{+path}` in `tmp`; on read and subscribe alike.
    for client in [&safe, &tmp] {
        for uri in std::iter::once("fs+file:///etc/passwd").chain(DISGUISED) {
            for method in ["resources/read", "resources/subscribe"] {
                let answer = client.request(method, json!({ "uri": uri })).await;
                refused_as_unknown(&answer, &format!("{method} {uri}"));
            }
        }
    }

    // A denied template is not completed however it is spelled.
    for uri in ["fs+file:///etc/{name}", "fs+file:///tmp/../etc/{name}"] {
        let answer = safe
            .request(
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": uri},
                       "argument": {"name": "name", "value": "p"}}),
            )
            .await;
        refused_as_unknown(&answer, uri);
    }

    // Listings decide on the canonical form: the upstream's `file:///tmp/../etc/shadow` is
    // under `/etc`.
    let listed: Vec<String> = safe
        .list_all("resources/list", "resources")
        .await
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        listed.contains(&"fs+file:///tmp/notes.txt".to_owned())
            && !listed
                .iter()
                .any(|u| u.contains("passwd") || u.contains("shadow")),
        "{listed:?}"
    );

    // An upstream's answer naming a resource the view denies loses that item.
    for client in [&safe, &tmp] {
        let read = client
            .result("resources/read", json!({"uri": "fs+file:///tmp/dir/links"}))
            .await;
        let uris: Vec<&str> = read["contents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["uri"].as_str().unwrap())
            .collect();
        assert_eq!(uris, ["fs+file:///tmp/dir/links/a"], "{read}");
    }

    // The whole catalog still reads everything.
    let full = Client::connect(&daemon.url).await;
    let read = full
        .result("resources/read", json!({"uri": "fs+file:///etc/passwd"}))
        .await;
    assert_eq!(read["contents"][0]["text"], "read file:///etc/passwd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_with_another_spelling_gets_the_upstreams_updates() {
    let daemon = start().await;
    let safe = Client::connect(&format!("{}/safe", daemon.url)).await;
    let mut events = safe.events().await;
    safe.result(
        "resources/subscribe",
        json!({"uri": "fs+file:///tmp/sub/../%6Eotes.txt"}),
    )
    .await;
    // The upstream was subscribed to the canonical form, and names it in its update.
    let touched = safe
        .tool_text("fs__touch", json!({"uri": "file:///tmp/notes.txt"}))
        .await;
    assert!(touched.contains("subscribed: true"), "{touched}");
    let update = events.next().await;
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], "fs+file:///tmp/notes.txt");
}
