//! Starting an upstream's child process and ending its whole process group.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use crate::config::UpstreamConfig;

/// Starts the child: cleared environment plus the inherited and configured variables, its own
/// process group (so the group can be killed whole), pipes on stdin/stdout/stderr.
pub(super) fn spawn(config: &UpstreamConfig) -> Result<Child, String> {
    let mut cmd = Command::new(&config.command);
    cmd.args(&config.args)
        .env_clear()
        .envs(
            config
                .inherit_env
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
        )
        .envs(&config.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &config.cwd {
        cmd.current_dir(cwd);
    }
    cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound if config.cwd.as_ref().is_some_and(|d| !d.is_dir()) => {
            format!(
                "working directory {} does not exist",
                config
                    .cwd
                    .as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            )
        }
        std::io::ErrorKind::NotFound => format!(
            "program `{}` not found (is it installed and on PATH?)",
            config.command
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("program `{}` is not executable", config.command)
        }
        _ => format!("cannot start `{}`: {e}", config.command),
    })
}

/// Sends `signal` to every process in the group led by `pid`. A group that is already gone is fine.
pub(super) fn signal_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(raw), signal);
    }
}

/// Watches a running child: reports its exit once, and ends its whole group when asked (or when
/// this guard is dropped), so no process of an upstream outlives its actor.
pub(super) struct ChildGuard {
    kill: Option<oneshot::Sender<Duration>>,
    done: Option<oneshot::Receiver<()>>,
}

impl ChildGuard {
    /// Takes ownership of `child`; `on_exit` gets a sentence describing how it exited.
    pub(super) fn watch(mut child: Child, on_exit: impl FnOnce(String) + Send + 'static) -> Self {
        let pid = child.id();
        let (kill_tx, mut kill_rx) = oneshot::channel::<Duration>();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => {
                    on_exit(describe_exit(status));
                    // The child is gone; its grandchildren may not be. End them when we are asked to.
                    let _ = kill_rx.await;
                    if let Some(pid) = pid {
                        signal_group(pid, Signal::SIGKILL);
                    }
                }
                grace = &mut kill_rx => {
                    if let Some(pid) = pid {
                        terminate_group(pid, &mut child, grace.unwrap_or_default()).await;
                    }
                }
            }
            let _ = done_tx.send(());
        });
        Self {
            kill: Some(kill_tx),
            done: Some(done_rx),
        }
    }

    /// Ends the process group (SIGTERM, then SIGKILL after `grace`) and waits until it is done.
    pub(super) async fn terminate(mut self, grace: Duration) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(grace);
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(Duration::ZERO);
        }
    }
}

fn describe_exit(status: std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("process exited with status {code}"),
            (None, Some(sig)) => format!("process was killed by signal {sig}"),
            _ => "process exited".to_owned(),
        },
        Err(e) => format!("process could not be waited for: {e}"),
    }
}

async fn terminate_group(pid: u32, child: &mut Child, grace: Duration) {
    signal_group(pid, Signal::SIGTERM);
    let _ = tokio::time::timeout(grace, child.wait()).await;
    // Grandchildren may outlive the child; the group kill reaches them too.
    signal_group(pid, Signal::SIGKILL);
    let _ = child.kill().await;
}
