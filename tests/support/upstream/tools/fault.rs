//! The fault injection tools (listed with `--fault-tools`): `hang`, `garbage`, `flood`,
//! `stop_pings` and `deep`.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::server::Server;
use crate::tools::{Family, text_result, uint_arg};
use crate::wire::{Out, Outcome, RpcError, ok_line};

impl Server {
    /// Runs the tool `name` if it is one of this family.
    pub(crate) fn fault_tool(&self, id: &Value, name: &str, params: &Value) -> Family {
        let reply = |result: &Value| Ok(Outcome::Reply(ok_line(id, result)));
        let outcome: Result<Outcome, RpcError> = match name {
            // Never answered; other requests are still served.
            "hang" => Ok(Outcome::Silent),
            "garbage" => {
                let _ = self
                    .out
                    .send(Out::Line("this is not JSON-RPC, just garbage".to_owned()));
                reply(&text_result("garbage sent"))
            }
            "flood" => {
                let count = uint_arg(params.get("arguments"), "count", 1000)?;
                let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
                for i in 0..count {
                    self.link.notify(
                        "notifications/message",
                        json!({"level": "info", "logger": "flood", "data": i}),
                    );
                    let _ = self.out.send(Out::Line(changed.to_owned()));
                }
                reply(&text_result(&format!("flooded {count}")))
            }
            "stop_pings" => {
                self.ignore_pings.store(true, Ordering::Relaxed);
                reply(&text_result("pings stopped"))
            }
            // Written as text: serde_json would not write (nor read) a value that deep.
            "deep" => {
                let depth = uint_arg(params.get("arguments"), "depth", 200_000)?;
                let depth = usize::try_from(depth).unwrap_or(usize::MAX);
                let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                let id = serde_json::to_string(id).unwrap_or_default();
                Ok(Outcome::Reply(format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"deep"}}],"structuredContent":{{"deep":{nested}}}}}}}"#
                )))
            }
            _ => return Ok(None),
        };
        outcome.map(Some)
    }
}
