"""A server on the official Python SDK 2.3's `MCPServer`, which serves both eras over stdio (it
cannot be made modern-only): run by tests/interop/modern_upstream.rs behind mcpmux, once under
`protocol = "auto"` (mcpmux must find and speak 2026-07-28) and once under `"legacy"`."""

from mcp.server import MCPServer

server = MCPServer("dual-era")


@server.tool()
def shout(text: str) -> str:
    """Upper-cases its text."""
    return text.upper()


if __name__ == "__main__":
    server.run()
