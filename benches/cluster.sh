#!/usr/bin/env bash
# What the load balancer hop costs (docs/benchmarks.md, "Replicas"): three mcpmux replicas on
# 127.0.0.11-13 behind HAProxy (tests/cluster/haproxy.cfg.in, the recipe's routing), each with one
# test upstream, measured by the load generator through HAProxy and against one replica direct,
# alternating, in both eras. A benchmark, not a test: it prints the load generator's JSON lines.
#
#   benches/cluster.sh [REPEATS (3)] [CALLS (20000)]
#
# Needs release binaries (`cargo build --release --all-targets`) and haproxy. Listens on loopback
# only; stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
calls=${2:-20000}
bin=target/release/mcpmux
upstream=$PWD/target/release/mcpmux-test-upstream
loadgen=$(ls -t target/release/deps/loadgen-* | grep -v '\.d$' | head -1)
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
printf '1 %s\n' "$(openssl rand -hex 32)" > "$dir/cursor.keys"
chmod 600 "$dir/cursor.keys"
declare -A ports ips=([a]=127.0.0.11 [b]=127.0.0.12 [c]=127.0.0.13)
for r in a b c; do ports[$r]=$(port); done
cat > "$dir/mcpmux.toml" <<TOML
[server]
listen = "127.0.0.1:0"
cursor_keys = "cursor.keys"
[audit]
enabled = false
[cluster]
[cluster.peers]
a = "http://${ips[a]}:${ports[a]}"
b = "http://${ips[b]}:${ports[b]}"
c = "http://${ips[c]}:${ports[c]}"
[upstreams.up1]
command = "$upstream"
args = ["--name", "up1"]
TOML
for r in a b c; do
  "$bin" serve --config "$dir/mcpmux.toml" --replica "$r" --listen "${ips[$r]}:${ports[$r]}" \
    --admin off --state-dir "$dir/state-$r" > "$dir/$r.out" 2> "$dir/$r.err" &
  pids+=($!)
done
front=$(port); stats=$(port)
sed -e "s/{{FRONTEND}}/127.0.0.1:$front/" -e "s/{{STATS}}/127.0.0.1:$stats/" \
    -e "s/{{SERVER_a}}/${ips[a]}:${ports[a]}/" -e "s/{{SERVER_b}}/${ips[b]}:${ports[b]}/" \
    -e "s/{{SERVER_c}}/${ips[c]}:${ports[c]}/" -e 's/^    log stdout.*//' -e 's/^    option httplog//' \
    tests/cluster/haproxy.cfg.in > "$dir/haproxy.cfg"
PATH=$PATH:/usr/sbin haproxy -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  up=$(curl -s "http://127.0.0.1:$stats/stats;csv" | grep -c ',UP,' || true)
  [ "$up" -ge 3 ] && break
  sleep 0.2
done
for i in $(seq "$repeats"); do
  for era in handshake 2026-07-28; do
    for where in "haproxy http://127.0.0.1:$front/mcp" "direct http://${ips[a]}:${ports[a]}/mcp"; do
      set -- $where
      out=$("$loadgen" --target "$2" --era "$era" --calls "$calls" --concurrency 16 --json)
      echo "{\"via\": \"$1\", \"run\": $i, \"report\": $out}"
    done
  done
done
