#!/usr/bin/env python3
"""Interop check: the official MCP Python SDK (`pip install mcp`) against mcpmux.

Run by tests/interop/interop.rs against a daemon with two test upstreams, `alpha` and `beta`:

    python_client.py --http http://127.0.0.1:PORT/mcp
    python_client.py --stdio "/path/to/mcpmux stdio --url http://127.0.0.1:PORT/mcp"

It connects with the SDK's high-level `mcp.Client` (default `--mode auto`: the SDK first probes
`server/discover` and stays on the 2026-07-28 revision when it is answered, falling back to the
`initialize` handshake otherwise; `--mode legacy` handshakes; `--mode 2026-07-28` is stateless from
the first request), lists tools across every page, calls tools, gets a prompt, reads resources
(plain and template-expanded), lists resource templates and (handshake era only: 2026-07-28 has no
ping) pings. Over HTTP it also records every HTTP exchange the SDK made (method, status, content
type, MCP headers) and checks them: a handshake session is issued, used and, after the SDK closed
it, really gone; a stateless connection sends the envelope's version and method on every POST and
never gets a session.

On success it prints one JSON summary line on stdout and exits 0. On any failure it prints
`python_client: FAILED: <reason>` on stderr and exits 1 (2 when the SDK is not installed).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any

from sdk_host import import_failed, parse_args, report, sdk_version, stdio_server

try:
    import anyio
    import httpx2
    import mcp
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
except ImportError as exc:  # pragma: no cover - environment problem, not a test result
    import_failed("python_client", exc)


MODERN = "2026-07-28"


class CheckFailed(Exception):
    """A check about mcpmux's behaviour failed."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class HttpLog:
    """Every HTTP exchange the SDK made, recorded by httpx2 event hooks."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []
        self.session_id: str | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        body = request.content.decode("utf-8", "replace") if request.method == "POST" else ""
        rpc_method = None
        if body:
            try:
                rpc_method = json.loads(body).get("method")
            except (ValueError, AttributeError):
                rpc_method = "?"
        issued = response.headers.get("mcp-session-id")
        if issued:
            self.session_id = issued
        self.exchanges.append(
            {
                "http": request.method,
                "rpc": rpc_method,
                "status": response.status_code,
                "content_type": response.headers.get("content-type", "").split(";")[0],
                "sent_version": request.headers.get("mcp-protocol-version"),
                "sent_method": request.headers.get("mcp-method"),
                "sent_session": "mcp-session-id" in request.headers,
                "issued_session": issued is not None,
            }
        )


async def list_all(fetch, field: str) -> tuple[list[Any], int]:
    """Every item of a paginated listing, following nextCursor; returns (items, pages)."""
    items: list[Any] = []
    cursor: str | None = None
    for pages in range(1, 10_001):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            return items, pages
        check(cursor != "", f"{field}: empty nextCursor")
    raise CheckFailed(f"{field}: listing never ended")


def text_of(content: Any) -> str | None:
    return getattr(content, "text", None)


async def exercise(client: Client, pinned: bool) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "protocol_version": client.protocol_version,
        "server_name": client.server_info.name if client.server_info else None,
    }
    caps = client.server_capabilities
    # A client pinned to 2026-07-28 asks nothing up front: the SDK makes up an empty discovery.
    if not pinned:
        check(caps.tools is not None, f"server capabilities lack tools: {caps}")
        check(caps.prompts is not None, f"server capabilities lack prompts: {caps}")
        check(caps.resources is not None, f"server capabilities lack resources: {caps}")

    tools, pages = await list_all(client.list_tools, "tools")
    names = [t.name for t in tools]
    check(len(names) == len(set(names)), f"duplicate tool names: {names}")
    for expected in ("alpha__echo", "beta__echo", "alpha__fancy", "beta__slow"):
        check(expected in names, f"{expected} missing from tools/list: {names}")
    summary["tools"] = len(names)
    summary["tool_pages"] = pages
    summary["tool_names"] = sorted(names)

    echoed = {}
    for upstream in ("alpha", "beta"):
        result = await client.call_tool(f"{upstream}__echo", {"text": "hi"})
        check(not result.is_error, f"{upstream}__echo returned isError: {result}")
        structured = result.structured_content
        check(isinstance(structured, dict), f"{upstream}__echo: no structuredContent: {result}")
        check(
            structured.get("upstream") == upstream,
            f"{upstream}__echo answered by {structured.get('upstream')!r}: {structured}",
        )
        params = structured.get("params") or {}
        check(params.get("name") == "echo", f"upstream saw tool name {params.get('name')!r}")
        check(params.get("arguments") == {"text": "hi"}, f"upstream saw arguments {params.get('arguments')!r}")
        echoed[upstream] = structured.get("upstream")
        if client.protocol_version == MODERN:
            # Each 2026-07-28 result names the server that wrote it.
            stamp = (result.meta or {}).get("io.modelcontextprotocol/serverInfo") or {}
            summary["result_server_name"] = stamp.get("name")
    summary["echo"] = echoed

    failed = await client.call_tool("alpha__fail", {})
    check(failed.is_error, f"alpha__fail should be a tool error result: {failed}")
    summary["tool_error_is_result"] = True

    prompts, _ = await list_all(client.list_prompts, "prompts")
    prompt_names = sorted(p.name for p in prompts)
    check("alpha__greet" in prompt_names, f"alpha__greet missing from prompts/list: {prompt_names}")
    prompt = await client.get_prompt("alpha__greet", {"name": "Ada"})
    check(len(prompt.messages) >= 1, f"prompt has no messages: {prompt}")
    summary["prompt"] = text_of(prompt.messages[0].content)
    check(summary["prompt"] == "Hello, Ada from alpha", f"prompt text: {summary['prompt']!r}")

    resources, _ = await list_all(client.list_resources, "resources")
    summary["resources"] = sorted(r.uri for r in resources)
    check(
        "alpha+test://alpha/hello" in summary["resources"],
        f"alpha+test://alpha/hello missing from resources/list: {summary['resources']}",
    )
    hello = await client.read_resource("alpha+test://alpha/hello")
    check(len(hello.contents) == 1, f"resources/read: {hello}")
    summary["hello"] = text_of(hello.contents[0])
    check(summary["hello"] == "hello from alpha", f"hello text: {summary['hello']!r}")
    check(
        hello.contents[0].uri == "alpha+test://alpha/hello",
        f"content URI is not the exposed one: {hello.contents[0].uri!r}",
    )

    item = await client.read_resource("beta+test://beta/item/7")
    check(len(item.contents) == 1, f"template read: {item}")
    summary["item"] = text_of(item.contents[0])
    check(summary["item"] == "item 7 from beta", f"item text: {summary['item']!r}")

    templates, _ = await list_all(client.list_resource_templates, "resource_templates")
    summary["templates"] = sorted(t.uri_template for t in templates)
    for expected in ("alpha+test://alpha/item/{id}", "beta+test://beta/item/{id}"):
        check(expected in summary["templates"], f"{expected} missing from templates: {summary['templates']}")

    if client.protocol_version == MODERN:
        summary["ping"] = "not in 2026-07-28"
    else:
        with warnings.catch_warnings():
            # ping is deprecated for the 2026 era only; it is part of every handshake-era revision.
            warnings.simplefilter("ignore")
            await client.send_ping()
        summary["ping"] = True

    try:
        await client.call_tool("gamma__echo", {})
    except mcp.MCPError as exc:
        summary["unknown_tool_error"] = exc.error.code
    else:
        raise CheckFailed("calling gamma__echo should fail with a JSON-RPC error")
    check(summary["unknown_tool_error"] == -32602, f"unknown tool error code {summary['unknown_tool_error']}")
    return summary


async def session_is_gone(url: str, session_id: str, version: str) -> int:
    """POSTs a ping on the closed session; returns the HTTP status (404 expected)."""
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(
            url,
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-session-id": session_id,
                "mcp-protocol-version": version,
            },
            content=json.dumps({"jsonrpc": "2.0", "id": 99, "method": "ping"}),
        )
        return response.status_code


async def run_http(url: str, mode: str) -> dict[str, Any]:
    log = HttpLog()
    http = create_mcp_http_client()
    http.event_hooks["response"].append(log.on_response)
    async with http:
        started = time.monotonic()
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            summary = await exercise(client, mode == MODERN)
            version = client.protocol_version
        summary["seconds"] = round(time.monotonic() - started, 3)
    ex = log.exchanges
    summary["http"] = ex
    if version == MODERN:
        return check_stateless(summary, ex)
    check(log.session_id is not None, f"no Mcp-Session-Id was issued: {ex}")
    inits = [e for e in ex if e["rpc"] == "initialize"]
    check(len(inits) == 1 and inits[0]["status"] == 200, f"initialize exchange: {inits}")
    check(inits[0]["issued_session"], "initialize answer carried no Mcp-Session-Id")
    after_init = ex[ex.index(inits[0]) + 1 :]
    missing = [e for e in after_init if not e["sent_session"] or e["sent_version"] != version]
    check(not missing, f"SDK requests without session or version {version} header: {missing}")
    bad = [e for e in after_init if e["status"] >= 400]
    check(not bad, f"HTTP errors after initialize: {bad}")
    deletes = [e for e in ex if e["http"] == "DELETE"]
    check(len(deletes) == 1, f"the SDK should send one DELETE on close: {ex}")
    summary["delete_status"] = deletes[0]["status"]
    gets = [e for e in ex if e["http"] == "GET"]
    summary["get_stream"] = [(e["status"], e["content_type"]) for e in gets]
    summary["after_close_status"] = await session_is_gone(url, log.session_id, version)
    check(summary["after_close_status"] == 404, f"session still usable after DELETE: {summary}")
    return summary


def check_stateless(summary: dict[str, Any], ex: list[dict[str, Any]]) -> dict[str, Any]:
    """A 2026-07-28 connection over HTTP: POSTs only, each naming its version and method, no session."""
    check(all(e["http"] == "POST" for e in ex), f"a stateless client only POSTs: {ex}")
    check(not any(e["issued_session"] for e in ex), f"a session was issued to a stateless client: {ex}")
    unmirrored = [e for e in ex if e["sent_version"] != MODERN or e["sent_method"] != e["rpc"]]
    check(not unmirrored, f"POSTs without the version or method header: {unmirrored}")
    bad = [e for e in ex if e["status"] != 200]
    check(not bad, f"HTTP errors: {bad}")
    summary["get_stream"] = []
    summary["delete_status"] = None
    summary["after_close_status"] = None
    return summary


async def run_stdio(command: str, mode: str) -> dict[str, Any]:
    params = stdio_server(command)
    started = time.monotonic()
    client = Client(params, mode=mode)
    async with client:
        summary = await exercise(client, mode == MODERN)
        closing = time.monotonic()
    summary["close_seconds"] = round(time.monotonic() - closing, 3)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def main() -> int:
    args = parse_args(__doc__, timeout=120.0)

    async def body() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            if args.http:
                summary = await run_http(args.http, args.mode)
            else:
                summary = await run_stdio(args.stdio, args.mode)
        summary["transport"] = "http" if args.http else "stdio"
        summary["mode"] = args.mode
        summary["sdk"] = sdk_version()
        summary["ok"] = True
        return summary

    return report("python_client", body, (CheckFailed,))


if __name__ == "__main__":
    sys.exit(main())
