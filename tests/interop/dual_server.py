"""A server on the official Python SDK 2.3's `MCPServer`, which serves both eras (it cannot be
made modern-only): run by tests/interop/modern_upstream.rs behind mcpmux over stdio, once under
`protocol = "auto"` (mcpmux must find and speak 2026-07-28) and once under `"legacy"`, and with
`--http PORT` over Streamable HTTP. Its `ask` tool asks the client with `ctx.elicit`, which the
SDK sends as a request of the server's own: it works in the handshake era only (a 2026-07-28
request has no back-channel for it), as in many servers written for that era."""

import sys

from pydantic import BaseModel

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("dual-era")


@server.tool()
def shout(text: str) -> str:
    """Upper-cases its text."""
    return text.upper()


class Answer(BaseModel):
    answer: str


@server.tool()
async def ask(question: str, ctx: Context) -> str:
    """Asks the user `question` and says what they answered."""
    result = await ctx.elicit(question, Answer)
    if result.action == "accept":
        return f"You said: {result.data.answer}"
    return f"You chose to {result.action}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
