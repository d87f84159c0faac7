#!/usr/bin/env bash
# The official conformance suite's client mode runs `client.sh <server-url>` with
# MCP_CONFORMANCE_SCENARIO (and for some scenarios MCP_CONFORMANCE_CONTEXT) set. This starts mcpmux
# (MCPMUX_BIN, else the release build) with that URL as its only, unprefixed upstream, signs in the
# way a person's browser would, then lists tools and calls `test-tool` through mcpmux as a host.
set -euo pipefail
exec python3 "$(dirname "$0")/client.py" "${@: -1}"
