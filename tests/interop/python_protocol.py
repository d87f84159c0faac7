#!/usr/bin/env python3
"""Protocol fidelity: the official MCP Python SDK (`pip install mcp`) through mcpmux, end to end.

Run by tests/interop/protocol_python.rs against a daemon with two upstreams: `everything`
(`@modelcontextprotocol/server-everything` from npm) and `mine` (our test upstream):

    python_protocol.py --http http://127.0.0.1:PORT/mcp
    python_protocol.py --stdio "/path/to/mcpmux stdio --url http://127.0.0.1:PORT/mcp"

In one SDK session (`mcp.Client`; the tests pass `--mode legacy`, the handshake era these items
were written for, and once `--mode 2026-07-28`, where sampling, elicitation and roots arrive as
`input_required` rounds and what the revision dropped fails) that declares
sampling, elicitation and roots through its callbacks, it exercises eight things that only work
when mcpmux routes every message to exactly the right party:

 1. progress: `everything__trigger-long-running-operation` with a progress callback (each
    callback's arrival time is recorded: progress must arrive live, not with the result);
 2. sampling: `everything__trigger-sampling-request`, answered by the sampling callback;
 3. elicitation: `everything__trigger-elicitation-request`, answered by the elicitation callback;
 4. roots: `everything__get-roots-list`, answered by the list_roots callback;
 5. completion: `completion/complete` for `everything__completable-prompt` and the
    `everything+demo://resource/dynamic/text/{resourceId}` template;
 6. subscriptions: `resources/subscribe` on an exposed `everything+…` URI, then
    `everything__toggle-subscriber-updates` (server-everything sends `notifications/resources/updated`
    for every subscribed URI at once, then every 5 s; toggled off again at the end);
 7. logging: `logging/setLevel` then `everything__toggle-simulated-logging` (one message at once,
    then every 5 s; toggled off again at the end);
 8. list_changed: `mine__add_tool` {"name": "zz"} (server-everything never changes its tools after
    start-up), then `notifications/tools/list_changed` and `mine__zz` in a fresh listing.

Each item records what the SDK saw (or the error it raised) under `items.<name>` and the script
goes on with the next item, so the Rust test can judge every item on its own. The script prints
one JSON summary line on stdout and exits 0 when the session itself worked; it prints
`python_protocol: FAILED: <reason>` on stderr and exits 1 when it did not (2: SDK not installed).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from sdk_host import describe, import_failed, parse_args, report, sdk_version, stdio_server

try:
    import anyio
    from mcp import Client, types
except ImportError as exc:  # pragma: no cover - environment problem, not a test result
    import_failed("python_protocol", exc)

SAMPLED_TEXT = "sampled by the python host"
SAMPLED_MODEL = "python-sdk-test-model"
SAMPLING_PROMPT = "mcpmux-sampling-marker"
ELICITED_NAME = "Ada Lovelace"
ROOTS = [
    ("file:///tmp/mcpmux-protocol/alpha", "alpha root"),
    ("file:///tmp/mcpmux-protocol/beta", "beta root"),
]
SUBSCRIBED_URI = "everything+demo://resource/static/document/architecture.md"
TEXT_TEMPLATE = "everything+demo://resource/dynamic/text/{resourceId}"
#: The long-running operation: one progress notification every 0.4 s.
PROGRESS_SECONDS = 2
PROGRESS_STEPS = 5
#: How long one item may take (the long-running operation takes 2 s; the rest well under 1 s).
ITEM_TIMEOUT = 20.0


def dump(value: Any) -> Any:
    """A JSON-friendly form of an SDK model (wire names, no unset fields)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, mode="json", exclude_none=True)
    return value


def texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


class Host:
    """The host's side: every callback and every notification the SDK surfaced, in arrival order."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        self.logs: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self.sampling: list[dict[str, Any]] = []
        self.elicitation: list[dict[str, Any]] = []
        self.roots_requests = 0
        self.stream_errors: list[str] = []
        self._bump = anyio.Event()

    def _changed(self) -> None:
        self._bump.set()
        self._bump = anyio.Event()

    async def wait_for(self, what: str, condition: Callable[[], bool], timeout: float) -> float:
        """Waits until `condition()` holds (re-checked whenever something arrives); returns the wait."""
        started = time.monotonic()
        deadline = started + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{what} did not arrive within {timeout} s")
            with anyio.move_on_after(remaining):
                await self._bump.wait()
        return round(time.monotonic() - started, 3)

    def methods(self, method: str) -> list[dict[str, Any]]:
        return [n["params"] for n in self.notifications if n["method"] == method]

    # The SDK's callbacks -------------------------------------------------------------------

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.stream_errors.append(f"{type(message).__name__}: {message}")
        else:
            wire = dump(message)
            self.notifications.append({"method": wire.get("method"), "params": wire.get("params") or {}})
        self._changed()

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(dump(params))
        self._changed()

    async def on_sampling(self, _ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling.append(dump(params))
        self._changed()
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model=SAMPLED_MODEL,
            stop_reason="endTurn",
        )

    async def on_elicitation(self, _ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicitation.append(dump(params))
        self._changed()
        return types.ElicitResult(action="accept", content={"name": ELICITED_NAME, "check": True, "integer": 7})

    async def on_list_roots(self, _ctx: Any) -> types.ListRootsResult:
        self.roots_requests += 1
        self._changed()
        return types.ListRootsResult(roots=[types.Root(uri=uri, name=name) for uri, name in ROOTS])


# The eight items ---------------------------------------------------------------------------


async def item_progress(client: Client, host: Host) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []
    started = time.monotonic()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        # `at`: seconds since the call started, to tell live progress from progress held back
        # until the result.
        at = round(time.monotonic() - started, 3)
        seen.append({"progress": progress, "total": total, "message": message, "at": at})
        host._changed()  # noqa: SLF001 - wakes wait_for

    result = await client.call_tool(
        "everything__trigger-long-running-operation",
        {"duration": PROGRESS_SECONDS, "steps": PROGRESS_STEPS},
        progress_callback=on_progress,
    )
    out: dict[str, Any] = {"seconds": round(time.monotonic() - started, 3)}
    out["result_text"] = texts(result)
    out["is_error"] = bool(result.is_error)
    # The callback runs in a task the SDK spawns per notification: give the last one a moment.
    await host.wait_for("every progress callback", lambda: len(seen) >= PROGRESS_STEPS, 5.0)
    out["callbacks"] = seen
    # The raw notifications as they reached the message handler: which token each carried.
    out["tokens"] = [p.get("progressToken") for p in host.methods("notifications/progress")]
    return out


async def item_sampling(client: Client, host: Host) -> dict[str, Any]:
    result = await client.call_tool("everything__trigger-sampling-request", {"prompt": SAMPLING_PROMPT, "maxTokens": 33})
    return {"is_error": bool(result.is_error), "result_text": texts(result), "requests": host.sampling}


async def item_elicitation(client: Client, host: Host) -> dict[str, Any]:
    result = await client.call_tool("everything__trigger-elicitation-request", {})
    return {"is_error": bool(result.is_error), "result_text": texts(result), "requests": host.elicitation}


async def item_roots(client: Client, host: Host) -> dict[str, Any]:
    result = await client.call_tool("everything__get-roots-list", {})
    out: dict[str, Any] = {
        "is_error": bool(result.is_error),
        "result_text": texts(result),
        "roots_requests": host.roots_requests,
        "declared": [uri for uri, _ in ROOTS],
    }

    # server-everything logs (logger "everything-server") once it has the roots; the log travels on
    # the session's stream, the tool result on the request's, so either may arrive first.
    def roots_logs() -> list[dict[str, Any]]:
        return [log for log in host.logs if "Roots updated" in str(log.get("data"))]

    await host.wait_for("the `Roots updated` log message", lambda: bool(roots_logs()), 5.0)
    out["roots_logs"] = roots_logs()
    return out


async def item_completion(client: Client, _host: Host) -> dict[str, Any]:
    prompt = types.PromptReference(type="ref/prompt", name="everything__completable-prompt")
    department = await client.complete(prompt, {"name": "department", "value": "E"})
    lead = await client.complete(prompt, {"name": "name", "value": ""}, context_arguments={"department": "Sales"})
    template = types.ResourceTemplateReference(type="ref/resource", uri=TEXT_TEMPLATE)
    resource_id = await client.complete(template, {"name": "resourceId", "value": "7"})
    return {
        "department_E": department.completion.values,
        "name_for_sales": lead.completion.values,
        "template_resource_id_7": resource_id.completion.values,
    }


async def item_subscription(client: Client, host: Host) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated for the 2026 era only
        await client.subscribe_resource(SUBSCRIBED_URI)
    out: dict[str, Any] = {"subscribed": SUBSCRIBED_URI}
    try:
        started = await client.call_tool("everything__toggle-subscriber-updates", {})
        out["toggle_on"] = texts(started)

        def updated() -> bool:
            return any(p.get("uri") == SUBSCRIBED_URI for p in host.methods("notifications/resources/updated"))

        out["waited"] = await host.wait_for("notifications/resources/updated", updated, 15.0)
    finally:
        # Leave server-everything as it was: the toggle is per upstream session, which mcpmux shares.
        if "toggle_on" in out:
            stopped = await client.call_tool("everything__toggle-subscriber-updates", {})
            out["toggle_off"] = texts(stopped)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.unsubscribe_resource(SUBSCRIBED_URI)
        out["updates"] = host.methods("notifications/resources/updated")
    return out


def is_simulated_log(log: dict[str, Any]) -> bool:
    """server-everything's simulated messages: "Debug-level message", …, "Alert level-message"."""
    data = str(log.get("data")).lower()
    return "level-message" in data or "level message" in data


async def item_logging(client: Client, host: Host) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated for the 2026 era only
        await client.set_logging_level("debug")
    before = len(host.logs)
    out: dict[str, Any] = {}
    try:
        started = await client.call_tool("everything__toggle-simulated-logging", {})
        out["toggle_on"] = texts(started)

        def simulated() -> bool:
            return any(is_simulated_log(log) for log in host.logs[before:])

        out["waited"] = await host.wait_for("a simulated log message", simulated, 15.0)
    finally:
        if "toggle_on" in out:
            stopped = await client.call_tool("everything__toggle-simulated-logging", {})
            out["toggle_off"] = texts(stopped)
        out["logs"] = list(host.logs)
    return out


async def item_list_changed(client: Client, host: Host) -> dict[str, Any]:
    before = len(host.methods("notifications/tools/list_changed"))
    added = await client.call_tool("mine__add_tool", {"name": "zz"})
    out: dict[str, Any] = {"add_tool": texts(added), "add_tool_is_error": bool(added.is_error)}
    out["waited"] = await host.wait_for(
        "notifications/tools/list_changed",
        lambda: len(host.methods("notifications/tools/list_changed")) > before,
        15.0,
    )
    names: list[str] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names.extend(t.name for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    out["has_mine__zz"] = "mine__zz" in names
    if out["has_mine__zz"]:
        called = await client.call_tool("mine__zz", {"x": 1})
        out["zz_structured"] = called.structured_content
    return out


#: Logging comes early so that the log messages server-everything sends while serving later items
#: (roots received, subscription acknowledged) reach this session too.
ITEMS: list[tuple[str, Callable[[Client, Host], Awaitable[dict[str, Any]]]]] = [
    ("progress", item_progress),
    ("logging", item_logging),
    ("sampling", item_sampling),
    ("elicitation", item_elicitation),
    ("roots", item_roots),
    ("completion", item_completion),
    ("subscription", item_subscription),
    ("list_changed", item_list_changed),
]


async def exercise(client: Client, host: Host) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "protocol_version": client.protocol_version,
        "server_name": client.server_info.name if client.server_info else None,
        "capabilities": dump(client.server_capabilities),
    }
    listing = await client.list_tools()
    summary["tools"] = sorted(t.name for t in listing.tools)
    items: dict[str, Any] = {}
    for name, run in ITEMS:
        started = time.monotonic()
        try:
            with anyio.fail_after(ITEM_TIMEOUT):
                items[name] = await run(client, host)
        except TimeoutError as exc:
            # anyio.fail_after raises it without a message; wait_for says what did not arrive.
            why = str(exc) or f"the item did not finish within {ITEM_TIMEOUT} s"
            items[name] = {"error": f"TimeoutError: {why}"}
        except Exception as exc:  # noqa: BLE001 - recorded for the Rust test, which names the item
            items[name] = {"error": describe(exc)}
        if "error" in items[name]:
            # What had reached the host by then: tells "never asked" from "asked, answer lost".
            items[name]["host_callbacks"] = {
                "sampling": len(host.sampling),
                "elicitation": len(host.elicitation),
                "roots": host.roots_requests,
            }
        items[name]["item_seconds"] = round(time.monotonic() - started, 3)
    summary["items"] = items
    summary["notification_methods"] = [n["method"] for n in host.notifications]
    # Every log message of the session, as the logging callback got it and as it came on the wire.
    summary["logs"] = host.logs
    summary["wire_loggers"] = [p.get("logger") for p in host.methods("notifications/message")]
    summary["stream_errors"] = host.stream_errors
    return summary


def make_client(server: Any, host: Host, mode: str) -> Client:
    return Client(
        server,
        mode=mode,
        sampling_callback=host.on_sampling,
        elicitation_callback=host.on_elicitation,
        list_roots_callback=host.on_list_roots,
        logging_callback=host.on_log,
        message_handler=host.on_message,
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    host = Host()
    if args.http:
        server: Any = args.http
    else:
        server = stdio_server(args.stdio)
    started = time.monotonic()
    async with make_client(server, host, args.mode) as client:
        summary = await exercise(client, host)
        closing = time.monotonic()
    # Over stdio the SDK closes the bridge's stdin and kills it after 2 s if it has not exited.
    summary["close_seconds"] = round(time.monotonic() - closing, 3)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def main() -> int:
    args = parse_args(__doc__, timeout=240.0)

    async def body() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            summary = await run(args)
        summary["transport"] = "http" if args.http else "stdio"
        summary["sdk"] = sdk_version()
        summary["ok"] = True
        return summary

    return report("python_protocol", body)


if __name__ == "__main__":
    sys.exit(main())
