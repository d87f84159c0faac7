//! MCP tasks (`--tasks`): the task table, a task's end (answering waiting `tasks/result`
//! requests, notifying its status), `tasks/*` requests and task-augmented `slow` calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::AbortHandle;

use crate::client_link::ClientLink;
use crate::server::Server;
use crate::tools::{error_result, text_result};
use crate::wire::{Outcome, RpcError, invalid_params, ok_line};

/// One task created by a task-augmented `slow` call (`--tasks`); its id is `task-<k>`,
/// stored at index k - 1.
pub(crate) struct TaskEntry {
    /// The `Task` object as answered by `tasks/get`.
    pub(crate) task: Value,
    /// The `CallToolResult` (with the related-task `_meta`) once the task is terminal.
    pub(crate) result: Option<Value>,
    /// Ids of `tasks/result` requests waiting for the task to end.
    pub(crate) waiters: Vec<Value>,
    /// The background sleep, aborted by `tasks/cancel`.
    pub(crate) work: Option<AbortHandle>,
}

pub(crate) type TaskTable = Arc<Mutex<Vec<TaskEntry>>>;

/// The current time as an RFC 3339 timestamp.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

pub(crate) fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Moves task `index` to the terminal `status` with `result` (unless it already is terminal),
/// answers the waiting `tasks/result` requests and sends `notifications/tasks/status`.
pub(crate) fn end_task(
    tasks: &TaskTable,
    link: &ClientLink,
    index: usize,
    status: &str,
    mut result: Value,
) -> Option<Value> {
    let (task, waiters) = {
        let mut table = tasks.lock().expect("task table lock");
        let entry = table.get_mut(index)?;
        if is_terminal(&entry.task) {
            return None;
        }
        entry.task["status"] = json!(status);
        entry.task["lastUpdatedAt"] = json!(now_rfc3339());
        if status == "cancelled" {
            entry.task["statusMessage"] = json!("The task was cancelled by request.");
        }
        result["_meta"] = json!({"io.modelcontextprotocol/related-task":
                                 {"taskId": entry.task["taskId"]}});
        entry.result = Some(result.clone());
        if let Some(work) = entry.work.take() {
            work.abort();
        }
        (entry.task.clone(), std::mem::take(&mut entry.waiters))
    };
    for id in waiters {
        link.send(ok_line(&id, &result));
    }
    link.notify("notifications/tasks/status", task.clone());
    Some(task)
}

impl Server {
    /// `tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list` (`--tasks`).
    pub(crate) fn task_request(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Outcome, RpcError> {
        if method == "tasks/list" {
            if let Some(cursor) = params.and_then(|p| p.get("cursor")) {
                return Err(invalid_params(format!("Unknown cursor: {cursor}")));
            }
            let table = self.tasks.lock().expect("task table lock");
            let tasks: Vec<&Value> = table.iter().map(|e| &e.task).collect();
            return Ok(Outcome::Reply(ok_line(id, &json!({ "tasks": tasks }))));
        }
        let task_id = params
            .and_then(|p| p.get("taskId"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params(format!("{method} requires a string `taskId`")))?;
        let unknown = || invalid_params(format!("Unknown task: {task_id}"));
        let index = task_id
            .strip_prefix("task-")
            .and_then(|k| k.parse::<usize>().ok())
            .and_then(|k| k.checked_sub(1))
            .ok_or_else(unknown)?;
        let mut table = self.tasks.lock().expect("task table lock");
        let entry = table.get_mut(index).ok_or_else(unknown)?;
        match method {
            "tasks/get" => Ok(Outcome::Reply(ok_line(id, &entry.task))),
            "tasks/result" => match &entry.result {
                Some(result) => Ok(Outcome::Reply(ok_line(id, result))),
                None => {
                    entry.waiters.push(id.clone());
                    Ok(Outcome::Silent)
                }
            },
            _ => {
                if is_terminal(&entry.task) {
                    return Err(invalid_params(format!(
                        "Cannot cancel task: already in terminal status '{}'",
                        entry.task["status"].as_str().unwrap_or_default()
                    )));
                }
                drop(table);
                let task = end_task(
                    &self.tasks,
                    &self.link,
                    index,
                    "cancelled",
                    error_result("task cancelled"),
                )
                .ok_or_else(unknown)?;
                Ok(Outcome::Reply(ok_line(id, &task)))
            }
        }
    }

    /// A task-augmented `slow` call: creates task `task-<k>`, answers its CreateTaskResult and
    /// sleeps `ms` in the background before completing it.
    pub(crate) fn create_task(&self, id: &Value, params: &Value, ms: u64) -> Outcome {
        let ttl = params["task"]
            .get("ttl")
            .and_then(Value::as_u64)
            .unwrap_or(60_000);
        let now = now_rfc3339();
        let mut table = self.tasks.lock().expect("task table lock");
        let index = table.len();
        let task = json!({"taskId": format!("task-{}", index + 1), "status": "working",
                          "createdAt": now, "lastUpdatedAt": now, "ttl": ttl});
        let tasks = Arc::clone(&self.tasks);
        let link = self.link.clone();
        let work = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let result = text_result(&format!("slept {ms}ms"));
            end_task(&tasks, &link, index, "completed", result);
        });
        table.push(TaskEntry {
            task: task.clone(),
            result: None,
            waiters: Vec::new(),
            work: Some(work.abort_handle()),
        });
        Outcome::Reply(ok_line(id, &json!({ "task": task })))
    }
}
