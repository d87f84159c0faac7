//! The fault injection tools (listed with `--fault-tools`): `hang`, `garbage`, `flood` and
//! `stop_pings`.

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
            _ => return Ok(None),
        };
        outcome.map(Some)
    }
}
