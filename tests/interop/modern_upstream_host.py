#!/usr/bin/env python3
"""A host on the official MCP Python SDK (`mcp.Client`, `--mode legacy` for a 2025-11-25
`ClientSession` handshake, or `--mode 2026-07-28`) in front of mcpmux, whose upstreams `mstdio` and
`mhttp` are the 2026-07-28-only TypeScript SDK v2 server (tests/interop/modern_server.mjs).

Run by tests/interop/modern_upstream.rs, two at once (one per mode) against one daemon:

    modern_upstream_host.py --http URL --mode MODE --name NAME

For each upstream it lists tools, calls `echo`, `progress` (with a progress callback), `survey` (two
rounds of elicitation answered by the callback with NAME and a colour), `sample` (the sampling
callback answers "NAME's model") and `roots` (the roots callback lists file:///NAME), gets the
`greet` prompt, completes its argument and reads the `info` resource. A legacy host is asked
through real server requests that mcpmux drives from the upstream's `input_required` rounds; a
2026-07-28 host gets the rounds themselves, which the SDK fulfils and retries. Prints one JSON
summary line with every text the calls returned and every request the callbacks saw; exits 1 on
any failure.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sdk_host import import_failed, report

try:
    import anyio
    from mcp import Client, types
except ImportError as exc:  # pragma: no cover - environment problem, not a test result
    import_failed("modern_upstream_host", exc)

PREFIXES = ["mstdio", "mhttp"]


class Host:
    """The host's answers, which name it, and what it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[dict[str, Any]] = []

    async def on_sampling(self, _ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append({"method": "sampling/createMessage"})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"{self.name}'s model"),
            model="python-test-model",
        )

    async def on_elicitation(self, _ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        message = getattr(params, "message", "")
        self.asked.append({"method": "elicitation/create", "message": message})
        if "name" in message:
            return types.ElicitResult(action="accept", content={"name": self.name})
        return types.ElicitResult(action="accept", content={"color": "blue"})

    async def on_list_roots(self, _ctx: Any) -> types.ListRootsResult:
        self.asked.append({"method": "roots/list"})
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{self.name}")])


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def exercise(client: Client, host: Host) -> dict[str, Any]:
    tools = [t.name for t in (await client.list_tools()).tools]
    out: dict[str, Any] = {"tools": tools}
    for prefix in PREFIXES:
        seen: list[float] = []

        async def on_progress(progress: float, _total: float | None, _message: str | None) -> None:
            seen.append(progress)

        item: dict[str, Any] = {}
        item["echo"] = text(await client.call_tool(f"{prefix}__echo", {"text": host.name}))
        item["progress"] = text(
            await client.call_tool(f"{prefix}__progress", {"steps": 3}, progress_callback=on_progress)
        )
        await anyio.sleep(0.2)
        item["progress_seen"] = seen
        item["survey"] = text(await client.call_tool(f"{prefix}__survey", {}))
        item["sample"] = text(await client.call_tool(f"{prefix}__sample", {"prompt": "2+2?"}))
        item["roots"] = text(await client.call_tool(f"{prefix}__roots", {}))
        prompt = await client.get_prompt(f"{prefix}__greet", {"name": host.name})
        item["prompt"] = prompt.messages[0].content.text
        completion = await client.complete(
            types.PromptReference(type="ref/prompt", name=f"{prefix}__greet"),
            {"name": "name", "value": "al"},
        )
        item["completion"] = completion.completion.values
        out[prefix] = item
    resources = (await client.list_resources()).resources
    info = next(r for r in resources if "mstdio" in str(r.uri))
    read = await client.read_resource(info.uri)
    out["resource"] = read.contents[0].text
    out["asked"] = host.asked
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", required=True)
    parser.add_argument("--mode", required=True, choices=["legacy", "2026-07-28"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    host = Host(args.name)

    async def body() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            async with Client(
                args.http,
                mode=args.mode,
                sampling_callback=host.on_sampling,
                elicitation_callback=host.on_elicitation,
                list_roots_callback=host.on_list_roots,
            ) as client:
                summary = await exercise(client, host)
        summary["mode"] = args.mode
        summary["ok"] = True
        return summary

    return report("modern_upstream_host", body)


if __name__ == "__main__":
    sys.exit(main())
