#!/usr/bin/env bash
# Latency of several servers at one offered load, open loop (corekv-bench
# --rate: 50 connections, SET:GET 1:10, 100-byte values over 100,000
# keys, 4 s), interleaved twice. Prints each run's avg, p50, p90 and p99 (ms).
#
#   bench/scripts/open-loop-latency.sh RATE LABEL:BINARY ...   (BINARY "redis" = redis-server)
set -euo pipefail
rate=$1
shift
pids=()
ports=()
labels=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# shellcheck source=bench/scripts/pinned-servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/pinned-servers.sh"
start_pinned_servers 26000 "${SERVER_CPU:-0}" "$@"
bench=$(dirname "${BASH_SOURCE[0]}")/../../target/release/corekv-bench
keys=(--key-minimum 0 --key-maximum 99999 --data-size 100 --seed 1)
for port in "${ports[@]}"; do
  taskset -c "${CLIENT_CPU:-1}" "$bench" -p "$port" -t 1 --preload -c 16 "${keys[@]}" >/dev/null 2>&1
done
echo "server avg p50 p90 p99 (ms) at $rate requests/s"
for _ in 1 2; do
  for i in "${!pids[@]}"; do
    taskset -c "${CLIENT_CPU:-1}" "$bench" -p "${ports[$i]}" -t 1 -c 50 --ratio 1:10 --rate "$rate" --test-time 4 "${keys[@]}" 2>&1 |
      awk -v l="${labels[$i]}" '/^Totals/ {print l, $5, $6, $7, $8}'
  done
done
