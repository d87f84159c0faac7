"""What the interop scripts share as hosts built on the official MCP Python SDK.

The interop scripts import it from their own folder: the SDK import guard, the command line
(`--http URL` or `--stdio COMMAND`, `--mode`, `--timeout`), the stdio server parameters of a
shell-quoted command, the SDK's version, the leaf exceptions of the (nested) exception groups anyio
raises, for the failure line, and the run that prints a summary or that line.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import traceback
from typing import Any, Awaitable, Callable, NoReturn


def import_failed(script: str, exc: ImportError) -> NoReturn:
    """Exits 2 (an environment problem, not a test result) when the SDK does not import."""
    print(
        f"{script}: FAILED: the MCP Python SDK is not importable ({exc}); the tests install it "
        "into their venv from tests/peers/requirements.txt",
        file=sys.stderr,
    )
    sys.exit(2)


def parse_args(doc: str | None, timeout: float) -> argparse.Namespace:
    """`--http URL` or `--stdio COMMAND`, the SDK connect `--mode`, the overall `--timeout`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--http", metavar="URL", help="the daemon's Streamable HTTP endpoint")
    target.add_argument("--stdio", metavar="COMMAND", help='e.g. "mcpmux stdio --url URL" (shell-quoted)')
    parser.add_argument(
        "--mode", default="auto", choices=["auto", "legacy", "2026-07-28"], help="SDK connect mode"
    )
    parser.add_argument("--timeout", type=float, default=timeout, help="overall deadline in seconds")
    return parser.parse_args()


def stdio_server(command: str) -> Any:
    """The SDK's `StdioServerParameters` that start the shell-quoted `command`."""
    from mcp import StdioServerParameters

    argv = shlex.split(command)
    if not argv:
        raise ValueError("--stdio needs a command")
    return StdioServerParameters(command=argv[0], args=argv[1:])


def sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("mcp")
    except Exception:  # noqa: BLE001 - informational only
        import mcp

        return getattr(mcp, "__version__", "unknown")


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio task groups raise."""
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, (list, tuple)) and inner:
        return [leaf for e in inner for leaf in leaf_exceptions(e)]
    return [exc]


def describe(exc: BaseException) -> str:
    """`Type: message` of every leaf exception, joined by `; `."""
    return "; ".join(f"{type(e).__name__}: {e}" for e in leaf_exceptions(exc))


def report(
    script: str,
    body: Callable[[], Awaitable[dict[str, Any]]],
    plain: tuple[type[BaseException], ...] = (),
) -> int:
    """Runs `body` and prints its summary as one JSON line (exit 0), or `<script>: FAILED: <reason>`
    on stderr (exit 1) — with the traceback, unless the failure is one of `plain` (a failed check,
    whose message says it all)."""
    import anyio

    try:
        summary = anyio.run(body)
    except plain as exc:
        print(f"{script}: FAILED: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 - report every failure, including exception groups
        traceback.print_exc()
        print(f"{script}: FAILED: {describe(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0
