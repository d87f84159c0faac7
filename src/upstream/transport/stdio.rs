//! The stdio transport: the upstream is a child process speaking newline-delimited JSON-RPC on
//! stdin/stdout. The child gets a cleared environment plus the inherited and configured
//! variables and its own process group; its stderr is captured as diagnostics; closing the link
//! (or dropping it) ends the whole group, so no process of an upstream outlives it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use super::{Diagnostics, Inbound, Incoming, Link, Outgoing, Teardown};
use crate::config::StdioConfig;
use crate::jsonrpc::line_codec;
use crate::upstream::error::{Closed, SpawnError, StartError};

/// Lines waiting for the writer task; a full queue makes callers wait (backpressure).
const WRITE_QUEUE: usize = 1024;
/// Longest stderr line kept whole.
const STDERR_LINE_BYTES: usize = 8 * 1024;
/// How long to wait for an exit status after the child closed its stdout, to report it.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(1);

/// Starts the child and the tasks around its pipes.
pub(super) fn open(
    config: &StdioConfig,
    max_message_bytes: usize,
    diagnostics: Arc<Diagnostics>,
) -> Result<Link, StartError> {
    let mut child = spawn(config).map_err(|e| StartError::Spawn(Arc::new(e)))?;
    let pid = child.id();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(StartError::Open("the child's pipes were not set up".into()));
    };
    let (outgoing, rx) = mpsc::channel(WRITE_QUEUE);
    tokio::spawn(write_loop(rx, stdin));
    tokio::spawn(stderr_loop(diagnostics, stderr));
    let (exit_tx, exit) = oneshot::channel();
    let guard = ChildGuard::watch(child, move |how| {
        let _ = exit_tx.send(how);
    });
    let reader = Reader {
        lines: FramedRead::new(stdout, line_codec(max_message_bytes)),
        max: max_message_bytes,
        exit,
        done: false,
    };
    Ok(Link {
        outgoing,
        incoming: incoming(reader),
        pid,
        describe: format!("command `{}`", config.command),
        teardown: Box::new(guard),
    })
}

/// Starts the child: cleared environment plus the inherited and configured variables, its own
/// process group (so the group can be killed whole), pipes on stdin/stdout/stderr.
fn spawn(config: &StdioConfig) -> Result<Child, SpawnError> {
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
    die_with_mcpmux(&mut cmd);
    cmd.spawn().map_err(|source| {
        let program = config.command.clone();
        match (source.kind(), &config.cwd) {
            (std::io::ErrorKind::NotFound, Some(cwd)) if !cwd.is_dir() => {
                SpawnError::NoDirectory(cwd.clone())
            }
            (std::io::ErrorKind::NotFound, _) => SpawnError::NotFound(program),
            (std::io::ErrorKind::PermissionDenied, _) => SpawnError::NotExecutable(program),
            _ => SpawnError::Other { program, source },
        }
    })
}

/// Makes the child get SIGKILL when mcpmux dies, however it dies (`kill -9` included): an
/// upstream that ignores the end of its stdin must not outlive the daemon. (An orderly stop
/// still kills the whole process group.) Linux delivers the signal when the thread that spawned
/// the child ends; that is a runtime worker thread, which lives as long as the daemon.
#[allow(unsafe_code)]
fn die_with_mcpmux(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    let set = move || -> std::io::Result<()> {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
        // mcpmux died between fork and prctl: the signal would never come. (No allocation
        // here: this runs between fork and exec.)
        if nix::unistd::getppid() != parent {
            return Err(nix::errno::Errno::ESRCH.into());
        }
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before exec and only makes two system calls
    // (prctl, getppid), which are async-signal-safe; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(set);
    }
}

/// The child's stdout as messages, ending with why: the exit status when the child ended (also
/// when a grandchild still holds stdout open), else what went wrong with the stream.
struct Reader {
    lines: FramedRead<ChildStdout, LinesCodec>,
    max: usize,
    /// How the child exited. A oneshot, so polling it beside every line costs an atomic load.
    exit: oneshot::Receiver<String>,
    done: bool,
}

fn incoming(reader: Reader) -> Incoming {
    Box::pin(futures_util::stream::unfold(reader, |mut r| async move {
        if r.done {
            return None;
        }
        let item = loop {
            let line = tokio::select! {
                biased;
                line = r.lines.next() => line,
                how = &mut r.exit => break Err(how.map_or(Closed::Eof, Closed::Exited)),
            };
            break match line {
                // Parsed here, once: the connection gets the message.
                Some(Ok(line)) => match super::receive(&line) {
                    Some(message) => message.map(Inbound::from),
                    None => continue,
                },
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => Err(Closed::TooLong(r.max)),
                Some(Err(LinesCodecError::Io(e))) => {
                    Err(Closed::Io(format!("reading its stdout failed: {e}")))
                }
                // The exit status says more than "closed its stdout", if it comes soon.
                None => match tokio::time::timeout(EXIT_STATUS_WAIT, &mut r.exit).await {
                    Ok(Ok(how)) => Err(Closed::Exited(how)),
                    _ => Err(Closed::Eof),
                },
            };
        };
        r.done = item.is_err();
        Some((item, r))
    }))
}

async fn write_loop(mut rx: mpsc::Receiver<Outgoing>, stdin: impl AsyncWrite + Unpin) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(message) = next {
            if write_line(&mut out, &message.bytes).await.is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

/// Writes one message as one line. Raw newlines in JSON text can only be insignificant whitespace
/// (inside strings they are escaped), so they become spaces and the framing holds.
async fn write_line(out: &mut (impl AsyncWrite + Unpin), line: &str) -> std::io::Result<()> {
    if memchr::memchr2(b'\n', b'\r', line.as_bytes()).is_some() {
        out.write_all(line.replace(['\n', '\r'], " ").as_bytes())
            .await?;
    } else {
        out.write_all(line.as_bytes()).await?;
    }
    out.write_all(b"\n").await
}

async fn stderr_loop(diagnostics: Arc<Diagnostics>, stderr: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(stderr, line_codec(STDERR_LINE_BYTES));
    while let Some(item) = lines.next().await {
        match item {
            Ok(line) if !line.trim().is_empty() => diagnostics.note(line),
            Ok(_) | Err(LinesCodecError::MaxLineLengthExceeded) => {}
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}

/// Sends `signal` to every process in the group led by `pid`. A group that is already gone is fine.
fn signal_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(raw), signal);
    }
}

/// Watches a running child: reports its exit once, and ends its whole group when asked (or when
/// this guard is dropped), so no process of an upstream outlives its link.
struct ChildGuard {
    kill: Option<oneshot::Sender<Duration>>,
    done: Option<oneshot::Receiver<()>>,
}

impl ChildGuard {
    /// Takes ownership of `child`; `on_exit` gets a sentence describing how it exited.
    fn watch(mut child: Child, on_exit: impl FnOnce(String) + Send + 'static) -> Self {
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
}

impl Teardown for ChildGuard {
    /// Ends the process group (SIGTERM, then SIGKILL after `grace`) and waits until it is done.
    fn close(mut self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(grace);
        }
        let done = self.done.take();
        Box::pin(async move {
            if let Some(done) = done {
                let _ = done.await;
            }
        })
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
