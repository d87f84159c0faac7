//! `mcpmux-test-upstream`: a small, controllable MCP server used by the
//! integration tests and the load generator. It is not installed for users.
//!
//! It speaks the MCP stdio transport: newline-delimited JSON-RPC 2.0 on
//! stdin/stdout, one message per line — or, with `--http ADDR`, Streamable HTTP at `/mcp` and the
//! legacy HTTP+SSE transport at `/sse` (see `http.rs`, which also lists the HTTP faults of
//! `--http-fault`), with a server of its own per session. Everything it answers is deterministic
//! and carries the instance `--name`, so tests can tell which upstream answered.
//!
//! What it offers:
//! - tools `echo` (returns the params it received, unchanged), `fancy` (a
//!   listing full of fields a gateway might drop), `slow` (answers after `ms`
//!   milliseconds without blocking other requests), `fail` (tool error result),
//!   `crash` (exits with status 3 mid-call), `huge` (one very long line),
//!   `add_tool` (adds an echo tool named `name`, or with an added tool's name gives it the
//!   new `description` — a rug pull — and sends `notifications/tools/list_changed`), plus
//!   `--tools N` generated tools `tool_00000`, `tool_00001`, ... (descriptions padded to about
//!   `--tool-description-bytes N` bytes, for a catalog big in bytes);
//! - protocol-routing tools, always callable but listed in `tools/list` only
//!   with `--protocol-tools` (so the default listing stays the 7 tools above):
//!   - `progress` {`steps` = 3, `delay_ms` = 20}: with `_meta.progressToken`,
//!     sends `steps` `notifications/progress` `delay_ms` apart, then answers
//!     "done <steps> steps";
//!   - `sample` {`prompt` = "hello"} (`sampling/createMessage`), `elicit`
//!     {`rounds` = 1} (`elicitation/create`, asked `rounds` times one after the other, the
//!     answer joining each "<action> <content JSON>" with " | "; with {`url`: KEY} it answers
//!     the first call naming KEY with error -32042, a URL to visit, and later ones "elicited:
//!     url visited"), `roots` (`roots/list`),
//!     `ping_client` (`ping`):
//!     send that request to the client with our own string id `srv-<n>`, wait
//!     for the matching response, and answer "sampled: <content.text>",
//!     "elicited: <action> <content JSON>", "roots: <roots JSON>" or "pong";
//!     a client error gives an `isError` result "<what> failed: <message>
//!     (<code>)", <what> being sampling, elicitation, roots or ping;
//!   - `notify_cancel`: sends a `sampling/createMessage`, cancels it with
//!     `notifications/cancelled` 100 ms later and answers "cancelled own
//!     request" (a late answer is ignored);
//!   - `log` {`level` = "info", `text`}: sends `notifications/message` (logger
//!     `testlog`) if `logging/setLevel` was received and `level` is at or above
//!     it, answers "logged"; `log_level` answers "level: <level or none>";
//!   - `touch` {`uri`}: sends `notifications/resources/updated` if `uri` is
//!     subscribed, answers "touched <uri> (subscribed: <bool>)";
//!     `subscriptions` answers the sorted JSON array of subscribed URIs;
//! - prompt `greet`, resource `test://<name>/hello`, template
//!   `test://<name>/item/{id}`; `resources/subscribe`/`unsubscribe` on those
//!   URIs; `completion/complete` for the `greet` argument `name` (Ada, Alan,
//!   Grace) and the template argument `id` (1, 2, 42);
//! - `notifications/cancelled` aborts an in-flight `slow` or `progress` call
//!   (no answer) and prints "cancelled <requestId>" to stderr (a string id is
//!   printed without quotes);
//! - `--tasks` (MCP 2025-11-25 tasks): declares the `tasks` capability (list, cancel,
//!   `tools/call`) and lists `slow` with `execution.taskSupport` "optional"; a `tools/call` of
//!   `slow` with a `task` param answers at once with a CreateTaskResult for task `task-<k>`
//!   (k = 1, 2, ...; status "working", `ttl` as requested or 60000) and sleeps in the
//!   background; a task-augmented call of another tool is refused with -32601. When the task
//!   ends (completed, or cancelled by `tasks/cancel`) it sends `notifications/tasks/status`
//!   with the whole task. `tasks/get` and `tasks/cancel` answer the task (cancelling a task in
//!   a terminal status is -32602); `tasks/result` answers, once the task is terminal, the
//!   CallToolResult ("slept <ms>ms", or an `isError` "task cancelled") with `_meta`
//!   `io.modelcontextprotocol/related-task`; `tasks/list` answers every task (no pagination);
//!   unknown task ids are -32602. Without `--tasks`, the `task` param is ignored;
//! - `--files`: also resources `file:///tmp/notes.txt`, `file:///etc/passwd` and (not canonical)
//!   `file:///tmp/../etc/shadow`, templates `file:///tmp/{+path}` and `file:///etc/{name}`; any
//!   `file:///` URI reads (and subscribes) as itself, "read <uri>", a URI ending in `/links`
//!   answering two contents: `<uri>/a` and `file:///etc/passwd` (a link out of the directory);
//! - optional self-pagination of every list (`--page-size`);
//! - fault injection flags (`--exit-at-start`, `--garbage-at-start`,
//!   `--ignore-pings`, `--hang-on-initialize`, `--spawn-grandchild`,
//!   `--huge-line-bytes`, `--crash-file PATH`) and `--record FILE` to log
//!   every received line; `--crash-file PATH` makes it print a line to stderr
//!   and exit with status 4 at start while PATH exists (delete the file to let
//!   the fault clear);
//! - fault injection tools, always callable but listed in `tools/list` only
//!   with `--fault-tools` (after the protocol-routing ones, before the
//!   generated ones): `hang` (never answers, keeps serving other requests),
//!   `garbage` (prints a non-JSON line on
//!   stdout, then answers "garbage sent"), `flood` {`count` = 1000} (sends
//!   `count` `notifications/message` and `count`
//!   `notifications/tools/list_changed`, interleaved, as fast as it can, then
//!   answers "flooded <count>"), `stop_pings` (from then on ignores `ping`, as
//!   `--ignore-pings` does; answers "pings stopped"), `deep` {`depth` = 200000} (answers with
//!   structured content nested `depth` levels deep).
//!
//! Design: the main task reads stdin and handles each line synchronously;
//! `slow`, `progress` and the tools that wait for the client spawn tokio
//! tasks. Responses from the client are routed by id to the task waiting for
//! them (unknown ids are ignored). Replies go through a channel to a writer
//! task on the same thread, which writes what is queued in one go, so a burst of
//! requests costs one write. Standard input and output are read and written
//! through epoll when they are pipes (as when a client spawns the server): no
//! thread hand-off per message, as a real server's event loop.
//!
//! Files: `main.rs` (flags, the stdin loop, the writer), `http.rs` (the HTTP mode and
//! its faults), `server.rs` (state and request
//! handling), `catalog.rs` (listings, prompt, resources, completions), `tools.rs` + `tools/`
//! (`tools/call` by family), `client_link.rs` (server → client requests), `tasks.rs` (MCP tasks),
//! `wire.rs` (JSON-RPC lines and codes).

mod catalog;
mod client_link;
mod http;
mod server;
mod tasks;
mod tools;
mod wire;

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use server::Server;
use wire::{Out, Outcome};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "mcpmux-test-upstream",
    about = "Controllable MCP stdio server for mcpmux tests and load generation"
)]
struct Args {
    /// Identifies this instance; included in answers.
    #[arg(long, default_value = "test")]
    name: String,
    /// Additionally generate N tools named tool_00000, tool_00001, ...
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools: usize,
    /// Pad each generated tool's description to about N bytes (a catalog big in bytes).
    #[arg(long, value_name = "N")]
    tool_description_bytes: Option<usize>,
    /// Paginate every list by K items (0 = no pagination).
    #[arg(long, value_name = "K", default_value_t = 0)]
    page_size: usize,
    /// Force the protocol version answered in initialize.
    #[arg(long, value_name = "V")]
    protocol_version: Option<String>,
    /// Print a line to stderr and exit with CODE before reading anything.
    #[arg(long, value_name = "CODE", allow_negative_numbers = true)]
    exit_at_start: Option<i32>,
    /// Append every line received on stdin to FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Include `instructions` in the initialize result.
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,
    /// Print a non-JSON line on stdout before anything else.
    #[arg(long)]
    garbage_at_start: bool,
    /// Also list `whoami`: it answers with the identity the call came with — the
    /// `MCPMUX_TEST_WHO` variable of this process, and over HTTP the `Authorization` header of
    /// the request that carried the call.
    #[arg(long)]
    whoami: bool,
    /// Never answer `ping`.
    #[arg(long)]
    ignore_pings: bool,
    /// Never answer `initialize`.
    #[arg(long)]
    hang_on_initialize: bool,
    /// Print a line to stderr and exit with status 4 at start while PATH exists.
    #[arg(long, value_name = "PATH")]
    crash_file: Option<PathBuf>,
    /// Keep running after stdin ends (a server that ignores EOF; only a signal stops it).
    #[arg(long)]
    ignore_stdin_eof: bool,
    /// Spawn `sleep 3600` at start (inheriting stdio) and print its pid to stderr.
    #[arg(long)]
    spawn_grandchild: bool,
    /// Size in bytes of the single line answered by the `huge` tool.
    #[arg(long, value_name = "N")]
    huge_line_bytes: Option<usize>,
    /// Also list the protocol-routing tools (progress, sample, elicit, roots,
    /// ping_client, notify_cancel, log, log_level, touch, subscriptions) in
    /// tools/list; they are callable either way.
    #[arg(long)]
    protocol_tools: bool,
    /// Also list the fault injection tools (hang, garbage, flood, stop_pings)
    /// in tools/list; they are callable either way.
    #[arg(long)]
    fault_tools: bool,
    /// Support MCP tasks: declare the `tasks` capability and run task-augmented `slow` calls
    /// as tasks (tasks/get, tasks/result, tasks/list, tasks/cancel, notifications/tasks/status).
    #[arg(long)]
    tasks: bool,
    /// Gives a listed tool another description: `TOOL=TEXT` (repeatable), as a server whose
    /// definitions changed between runs would.
    #[arg(long, value_name = "TOOL=TEXT")]
    describe: Vec<String>,
    /// Serve MCP over HTTP instead of stdio: Streamable HTTP at `http://ADDR/mcp`, legacy
    /// HTTP+SSE at `http://ADDR/sse` (port 0: any free port; printed on stdout as
    /// `listening on http://ADDR/mcp`).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// An HTTP fault to inject (with `--http`): status500, endless500, garbage-sse,
    /// garbage-json, huge-event=BYTES, hang, reset, down-while=PATH, forget-sessions. Repeatable.
    #[arg(long, value_name = "FAULT")]
    http_fault: Vec<http::HttpFault>,
    /// With `--http`: protect `/mcp` with OAuth, this process being its authorization server
    /// too (see `http/oauth.rs`); access tokens live SECS seconds.
    #[arg(long, value_name = "SECS")]
    oauth_token_ttl: Option<u64>,
    /// With `--oauth-token-ttl`: refuse refresh tokens while PATH exists.
    #[arg(long, value_name = "PATH")]
    oauth_revoke_while: Option<PathBuf>,
    /// With `--oauth-token-ttl`: a refresh token presented a second time revokes every token
    /// issued (the whole family, as authorization servers that rotate refresh tokens do).
    #[arg(long)]
    oauth_revoke_reuse: bool,
    /// With `--oauth-token-ttl`: the resource metadata names URL as the authorization server
    /// (a compromised upstream pointing at a server of its choice), not this process.
    #[arg(long, value_name = "URL")]
    oauth_authorization_server: Option<String>,
    /// With `--oauth-token-ttl`: the authorization server metadata claims URL as its `issuer`.
    #[arg(long, value_name = "URL")]
    oauth_metadata_issuer: Option<String>,
    /// With `--oauth-token-ttl`: `/token` answers every request with a 302 to URL.
    #[arg(long, value_name = "URL")]
    oauth_token_redirect: Option<String>,
    /// With `--oauth-token-ttl`: a token `/mcp` always admits (a service account's).
    #[arg(long, value_name = "TOKEN")]
    oauth_static_token: Option<String>,
    /// With `--oauth-token-ttl`: tokens exchanged (RFC 8693) name AUD as their audience instead
    /// of the `resource` asked for.
    #[arg(long, value_name = "AUD")]
    oauth_exchange_audience: Option<String>,
    /// With `--oauth-token-ttl`: `/authorize` asks the person who they are (a form with a
    /// `user` field) before it redirects, and the tokens it then issues end in `.USER`, so the
    /// upstream can tell whose they are (`whoami`).
    #[arg(long)]
    oauth_ask_user: bool,
    /// With `--oauth-token-ttl`: calls of tool NAME are refused with 403 `insufficient_scope`
    /// (a step-up: the tool wants a scope no token has).
    #[arg(long, value_name = "NAME")]
    oauth_scope_tool: Option<String>,
    /// With `--http`: answer every `initialize` after the first MS milliseconds late (a new
    /// session that takes a while to open, see the `forget-sessions` fault).
    #[arg(long, value_name = "MS")]
    http_reinitialize_delay: Option<u64>,
    /// Apply the `tools/call` faults of `--http-fault` to calls of this tool only.
    #[arg(long, value_name = "NAME")]
    http_fault_tool: Option<String>,
    /// Also serve `file:///` resources, as a file server would (see `catalog.rs`,
    /// `FILE_RESOURCES`): any `file:///` URI reads as "read <uri>", without resolving dot segments.
    #[arg(long)]
    files: bool,
}

/// The writer: writes queued lines, flushing only when the queue is empty. It runs on the
/// server's thread, so a reply costs no thread wake-up. Returns the exit code requested by
/// `Out::Exit` (or 0 when all senders are gone); exits the process with status 1 if stdout is
/// closed.
async fn write_out(mut rx: UnboundedReceiver<Out>) -> i32 {
    let mut stdout = stdout();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut exit = None;
    while let Some(mut msg) = rx.recv().await {
        loop {
            match msg {
                Out::Line(line) | Out::Caused { line, .. } => {
                    buf.extend_from_slice(line.as_bytes());
                    buf.push(b'\n');
                }
                Out::Exit(code) => {
                    exit = Some(code);
                    break;
                }
            }
            match rx.try_recv() {
                Ok(next) => msg = next,
                Err(_) => break,
            }
        }
        let written = async {
            stdout.write_all(&buf).await?;
            stdout.flush().await
        };
        if let Err(e) = written.await {
            eprintln!("test upstream: cannot write to stdout: {e}");
            std::process::exit(1);
        }
        buf.clear();
        if let Some(code) = exit {
            return code;
        }
    }
    0
}

/// Standard output: written through epoll when it is a pipe, else through tokio's `stdout` (a
/// blocking thread per write).
fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    use std::os::fd::AsFd;
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Sender::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}

/// Standard input: read through epoll when it is a pipe (as when a client spawned this server),
/// else (a file, a terminal) through tokio's `stdin`, which hands every read to a blocking thread
/// and back: three thread wake-ups per message, more CPU than the rest of a call here.
fn stdin() -> Box<dyn AsyncRead + Unpin> {
    use std::os::fd::AsFd;
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    if let Some(code) = args.exit_at_start {
        eprintln!("test upstream exiting at start");
        std::process::exit(code);
    }
    if let Some(path) = args.crash_file.as_ref().filter(|p| p.exists()) {
        eprintln!("test upstream crashing at start: {} exists", path.display());
        std::process::exit(4);
    }
    if args.garbage_at_start {
        let mut stdout = std::io::stdout().lock();
        let _ =
            writeln!(stdout, "this is not JSON-RPC, just garbage").and_then(|()| stdout.flush());
    }
    if args.spawn_grandchild {
        match std::process::Command::new("sleep").arg("3600").spawn() {
            Ok(mut child) => {
                eprintln!("grandchild pid {}", child.id());
                // Reap it if it ever dies while we are alive; never kill it ourselves.
                std::thread::spawn(move || child.wait());
            }
            Err(e) => eprintln!("test upstream: cannot spawn grandchild: {e}"),
        }
    }
    let mut record = args.record.as_ref().map(|path| {
        let file = File::options().create(true).append(true).open(path);
        file.unwrap_or_else(|e| {
            eprintln!(
                "test upstream: cannot open record file {}: {e}",
                path.display()
            );
            std::process::exit(2);
        })
    });

    if args.http.is_some() {
        eprintln!("test upstream {} started (HTTP)", args.name);
        http::serve(args, record.take()).await;
        return;
    }
    let (tx, rx) = unbounded_channel();
    let writer = tokio::spawn(write_out(rx));
    let server = Server::new(&args, tx.clone());
    eprintln!("test upstream {} started", args.name);

    let mut stdin = BufReader::with_capacity(64 * 1024, stdin());
    let mut buf = Vec::with_capacity(4096);
    let code = loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf).await {
            Ok(0) if args.ignore_stdin_eof => std::future::pending::<()>().await,
            Ok(0) => break 0, // EOF: exit cleanly.
            Ok(_) => {}
            Err(e) => {
                eprintln!("test upstream: cannot read stdin: {e}");
                break 1;
            }
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(file) = &mut record {
            // One write per line (File is unbuffered), so it is visible at once.
            let mut entry = Vec::with_capacity(line.len() + 1);
            entry.extend_from_slice(line);
            entry.push(b'\n');
            if let Err(e) = file.write_all(&entry) {
                eprintln!("test upstream: cannot write record file: {e}");
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match server.handle_line(line) {
            Outcome::Reply(text) => {
                // Fails only if the writer already exited the process.
                let _ = tx.send(Out::Line(text));
            }
            Outcome::Silent => {}
            Outcome::Exit(code) => break code,
        }
    };
    // Everything queued before this point is written and flushed first;
    // pending `slow` answers are abandoned.
    let _ = tx.send(Out::Exit(code));
    let code = writer.await.unwrap_or(1);
    std::process::exit(code);
}
