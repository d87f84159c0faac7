#!/usr/bin/env python3
"""Minimal MCP host (mcp==2.3.0 Python SDK) that completes URL-mode elicitation
by running an external command on the URL.

usage:
  signin_host_sketch.py URL TOKEN MODE TOOL ARGS_JSON -- CMD [CMD_ARGS...]

  MODE      legacy | auto | 2026-07-28
  ARGS_JSON JSON object with the tool arguments, e.g. '{"q": 1}'
  CMD...    external command; the elicitation URL is appended as the last
            argument, e.g.  -- node browser.mjs

Prints the CallToolResult as JSON on stdout (the command's own stdout is sent to
our stderr so it cannot pollute that JSON). Exit code 0 on success.

How the SDK does the work (see /tmp/pysdk-url-elicitation.md):
  * passing `elicitation_callback=` makes ClientSession advertise
    `elicitation: {form: {}, url: {}}` (mcp/client/session.py:634-638);
  * legacy (2025-11-25): a server `elicitation/create` request sent during the
    call is routed to the callback (session.py:1337-1389); a -32042 JSON-RPC
    error surfaces as plain `MCPError` (code == -32042), which we turn into
    `UrlElicitationRequiredError.from_error(...)` and retry once ourselves;
  * 2026-07-28: `Client.call_tool` itself dispatches `InputRequiredResult.inputRequests`
    to the callback and retries with `inputResponses` + `requestState`
    (mcp/client/client.py:810-839, mcp/client/_input_required.py:81-96).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx2

from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client import ClientRequestContext, Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    URL_ELICITATION_REQUIRED,
    CallToolResult,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
)


def _log(msg: str) -> None:
    print(f"[signin-host] {msg}", file=sys.stderr, flush=True)


async def open_url_with_command(cmd: list[str], url: str) -> int:
    """Run `cmd + [url]`, wait for it to exit, return its exit status."""
    _log(f"running {cmd!r} for {url}")
    done = await anyio.run_process(
        [*cmd, url],
        stdin=None,  # inherit
        stdout=sys.stderr.fileno(),  # keep our stdout clean for the JSON result
        stderr=sys.stderr.fileno(),
        check=False,
    )
    _log(f"command exited with {done.returncode}")
    return done.returncode


def make_elicitation_callback(cmd: list[str]):
    # Signature required by mcp.client.session.ElicitationFnT (session.py:214-219).
    async def on_elicit(ctx: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        if isinstance(params, ElicitRequestURLParams):
            _log(f"url elicitation (id={params.elicitation_id!r}, key/request={ctx.request_id!r}): {params.message}")
            rc = await open_url_with_command(cmd, params.url)
            # URL mode "accept" = consent given; no `content` (omitted on the wire).
            return ElicitResult(action="accept") if rc == 0 else ElicitResult(action="cancel")
        # ElicitRequestFormParams: this host has no form UI.
        _log(f"declining form elicitation: {params.message}")
        return ElicitResult(action="decline")

    return on_elicit


def build_transport(url: str, token: str, http: httpx2.AsyncClient) -> Transport:
    # The bearer header rides on the httpx2 client; streamable_http_client merges its own
    # per-request MCP headers on top (streamable_http.py:139-157, 366-375).
    return streamable_http_client(url, http_client=http)


async def run(
    target: Transport | str,
    mode: str,
    tool: str,
    arguments: dict[str, Any],
    cmd: list[str],
) -> CallToolResult:
    on_elicit = make_elicitation_callback(cmd)
    async with Client(target, mode=mode, elicitation_callback=on_elicit) as client:
        _log(f"connected, protocol {client.protocol_version}")
        try:
            # 2026-07-28: input_required rounds (incl. url elicitation) are driven in here.
            return await client.call_tool(tool, arguments)
        except MCPError as e:
            if e.code != URL_ELICITATION_REQUIRED:
                raise
            # Legacy-only (-32042 is retired at 2026-07-28). The SDK raises a plain MCPError;
            # rebuild the typed subclass to get the parsed elicitations.
            required = UrlElicitationRequiredError.from_error(e.error)
            _log(f"-32042: {len(required.elicitations)} url elicitation(s) required")
            for el in required.elicitations:
                rc = await open_url_with_command(cmd, el.url)
                if rc != 0:
                    raise SystemExit(f"sign-in command failed ({rc}) for elicitation {el.elicitation_id!r}")
            # No automatic retry in the SDK; retry exactly once.
            return await client.call_tool(tool, arguments)


async def amain(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    sep = argv.index("--")
    head, cmd = argv[:sep], argv[sep + 1 :]
    if len(head) != 5 or not cmd:
        print(__doc__, file=sys.stderr)
        return 2
    url, token, mode, tool, args_json = head
    arguments = json.loads(args_json)

    headers = {"Authorization": f"Bearer {token}"}
    # read=None: a legacy server may hold the tools/call SSE stream silent while the user
    # signs in; the SDK default read timeout is 300 s (shared/_httpx_utils.py MCP_DEFAULT_SSE_READ_TIMEOUT).
    timeout = httpx2.Timeout(30.0, read=None)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        result = await run(build_transport(url, token, http), mode, tool, arguments, cmd)
    print(json.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True)))
    return 1 if result.is_error else 0


def main() -> None:
    sys.exit(anyio.run(amain, sys.argv[1:]))


if __name__ == "__main__":
    main()
