#!/usr/bin/env bash
# list-compress-depth 0 vs 1, corekv --shards 1 vs redis-server: requests
# per second of list commands on one list of N compressible elements
# ("element:<i>", loaded with RPUSH through redis-cli --pipe), at the ends
# (LPUSH+LPOP pairs on the loaded list) and in the middle (LINDEX, LSET,
# LRANGE of 10 elements at N/2, which decompress a node each time).
# Prints markdown rows.
#
#   bench/list-compress.sh [elements] [requests]
set -euo pipefail
elements=${1:-1000000}
requests=${2:-200000}
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
cargo build --release -q -p corekv

gen() {
  awk -v n="$1" 'BEGIN {
    ORS = ""
    for (start = 0; start < n; start += 1000) {
      end = start + 1000 < n ? start + 1000 : n
      out = "*" (2 + end - start) "\r\n$5\r\nRPUSH\r\n$1\r\nl\r\n"
      for (i = start; i < end; i++) { s = "element:" i; out = out "$" length(s) "\r\n" s "\r\n" }
      print out
    }
  }'
}
wait_up() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; }
rps() { redis-benchmark -p "$1" -c 50 -P 16 -n "$requests" -q "${@:2}" | tr '\r' '\n' | awk '/requests per second/ { for (i = 2; i <= NF; i++) if ($i == "requests") r = $(i - 1) } END { print r }'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

echo "| depth | command | redis-server rps | corekv rps | corekv/redis |"
echo "|---|---|---|---|---|"
mid=$((elements / 2))
for depth in 0 1; do
  port_r=$((24000 + RANDOM % 1000))
  port_c=$((port_r + 1000))
  redis-server --port "$port_r" --save '' --appendonly no --list-compress-depth "$depth" >/dev/null 2>&1 &
  pid_r=$!
  target/release/corekv --port "$port_c" --shards 1 --list-compress-depth "$depth" >/dev/null 2>&1 &
  pid_c=$!
  pids=("$pid_r" "$pid_c")
  wait_up "$port_r"
  wait_up "$port_c"
  gen "$elements" | redis-cli -p "$port_r" --pipe >/dev/null
  gen "$elements" | redis-cli -p "$port_c" --pipe >/dev/null
  for cmd in "LPUSH l element:x" "LPOP l" "LINDEX l $mid" "LSET l $mid element:y" "LRANGE l $mid $((mid + 9))"; do
    # shellcheck disable=SC2086
    r=$(rps "$port_r" $cmd)
    # shellcheck disable=SC2086
    c=$(rps "$port_c" $cmd)
    printf '| %s | %s | %s | %s | %s |\n' "$depth" "$cmd" "$r" "$c" "$(awk -v c="$c" -v r="$r" 'BEGIN { printf "%.2f", c / r }')"
  done
  kill "$pid_r" "$pid_c"
  wait "$pid_r" "$pid_c" 2>/dev/null || true
done
