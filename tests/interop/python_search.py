#!/usr/bin/env python3
"""A host on the official MCP Python SDK (`pip install mcp`) working a `tools = "search"` profile.

Run by tests/interop/search_hosts.rs against a daemon whose profile `agent` holds
`@modelcontextprotocol/server-everything` (npm, as `everything`) and hides its `get-env`:

    python_search.py --http http://127.0.0.1:PORT/mcp/agent --mode legacy|2026-07-28

In one `mcp.Client` session (declaring sampling through its callback) it lists the tools (the two
search-mode tools are all it should see), then does what a model does: searches in words, takes
the first result, and calls it through `call_tool` with the arguments its inputSchema asks for —
a long-running tool whose progress reaches the SDK's progress callback, and a tool that asks the
host for sampling (in 2026-07-28 mode, as `input_required` rounds the SDK answers with the same
callback). It also searches for the hidden tool and calls it by name.

On success it prints one JSON summary line on stdout and exits 0; a failure prints
`python_search: FAILED: <reason>` on stderr and exits 1 (2 when the SDK is not installed).
"""

from __future__ import annotations

import sys
from typing import Any

from sdk_host import import_failed, parse_args, report, sdk_version

try:
    import anyio
    import mcp
    from mcp import Client, types
except ImportError as exc:  # pragma: no cover - environment problem, not a test result
    import_failed("python_search", exc)

SAMPLED_TEXT = "sampled for the search host"


def texts(result: Any) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def search(client: Client, query: str, limit: int = 5) -> list[dict[str, Any]]:
    result = await client.call_tool("search_tools", {"query": query, "limit": limit})
    if result.is_error:
        raise RuntimeError(f"search_tools {query!r} failed: {texts(result)}")
    structured = result.structured_content or {}
    return list(structured.get("tools", []))


async def run(args: Any) -> dict[str, Any]:
    sampled: list[dict[str, Any]] = []
    progress: list[float] = []

    async def on_sampling(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        sampled.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model="python-search-host",
            stop_reason="endTurn",
        )

    async def on_progress(value: float, _total: float | None, _message: str | None) -> None:
        progress.append(value)

    summary: dict[str, Any] = {"mode": args.mode}
    async with Client(args.http, mode=args.mode, sampling_callback=on_sampling) as client:
        listed = await client.list_tools()
        summary["listed"] = sorted(t.name for t in listed.tools)

        found = await search(client, "long running operation that reports progress")
        summary["progress_search"] = [t["name"] for t in found]
        chosen = found[0]
        summary["progress_schema_has_steps"] = "steps" in chosen.get("inputSchema", {}).get("properties", {})
        result = await client.call_tool(
            "call_tool",
            {"name": chosen["name"], "arguments": {"duration": 1, "steps": 3}},
            progress_callback=on_progress,
        )
        summary["progress_result"] = texts(result)
        # The callback runs in a task per notification: give the last one a moment.
        with anyio.move_on_after(5):
            while len(progress) < 3:
                await anyio.sleep(0.05)
        summary["progress"] = progress

        found = await search(client, "ask the LLM for a sampling completion")
        summary["sampling_search"] = [t["name"] for t in found]
        result = await client.call_tool(
            "call_tool",
            {"name": found[0]["name"], "arguments": {"prompt": "search mode", "maxTokens": 20}},
        )
        summary["sampling_result"] = texts(result)
        summary["sampling_requests"] = len(sampled)

        found = await search(client, "environment variables", 50)
        summary["env_search"] = [t["name"] for t in found]
        try:
            hidden = await client.call_tool("call_tool", {"name": "everything__get-env", "arguments": {}})
            summary["hidden_call"] = {"result": texts(hidden), "is_error": bool(hidden.is_error)}
        except mcp.MCPError as error:
            summary["hidden_call"] = {"code": error.error.code, "message": error.error.message}
    return summary


def main() -> int:
    args = parse_args(__doc__, timeout=120.0)

    async def body() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            summary = await run(args)
        summary["sdk"] = sdk_version()
        summary["ok"] = True
        return summary

    return report("python_search", body)


if __name__ == "__main__":
    sys.exit(main())
