#!/usr/bin/env bash
# The cost of the cross-core hop: the same SET/GET workload from
# corekv-bench against corekv in `cluster-mode no` (plain client on the
# shared port: keys land on any core, most requests hop) and in
# `cluster-mode per-core` (cluster-aware client: each key goes straight to
# its shard's own port, no hop), at 1 and 2 shards by default.
#
#   bench/cluster-hop.sh [--server-cpus 0-1] [--client-cpus 2-3] [--shards "1 2"]
#                        [--seconds 10] [--clients 25] [--threads 1]
# Prints a markdown table: ops/s, p99, server CPU µs/op, cross-core batches.
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpus=0
client_cpus=1
shard_counts="1 2"
seconds=10
clients=25
threads=1
while [ $# -gt 0 ]; do
  case $1 in
    --server-cpus) server_cpus=$2; shift 2 ;;
    --client-cpus) client_cpus=$2; shift 2 ;;
    --shards) shard_counts=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v redis-cli >/dev/null || scripts/setup-test-deps.sh
cargo build --release -q -p corekv -p corekv-bench
bench=target/release/corekv-bench
hz=$(getconf CLK_TCK)
port=$((22000 + RANDOM % 1000))

# "0-2,5" -> "0 1 2 5"
expand_cpus() {
  local item
  for item in ${1//,/ }; do
    if [[ $item == *-* ]]; then seq "${item%-*}" "${item#*-}"; else echo "$item"; fi
  done | paste -sd' ' -
}

# run SHARDS MODE -> one table row
run() {
  local shards=$1 mode=$2 pid target flags
  # The first SHARDS CPUs of the server set (shards wrap when there are
  # fewer CPUs than shards).
  local cpus
  cpus=$(expand_cpus "$server_cpus" | tr ' ' '\n' | head -n "$shards" | paste -sd, -)
  case $mode in
    no) flags=(--cluster-mode no); target=(-p "$port") ;;
    per-core) flags=(--cluster-mode per-core --cluster-port-base $((port + 1))); target=(-p $((port + 1)) --cluster) ;;
  esac
  taskset -c "$cpus" target/release/corekv --port "$port" --shards "$shards" --cpus "$cpus" "${flags[@]}" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local t0 t1 json ops p99
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  json=$(mktemp)
  taskset -c "$client_cpus" "$bench" "${target[@]}" -t "$threads" -c "$clients" --ratio 1:1 -d 100 \
    --key-maximum 100000 --test-time "$seconds" --json "$json" >/dev/null
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  local hops
  hops=$(redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '/^cross_core_batches/ {print $2}')
  # The run's totals come first in corekv-bench's JSON (per-command after).
  ops=$(grep -m1 '"ops_per_sec"' "$json" | sed 's/.*: *//; s/,//' | cut -d. -f1)
  p99=$(grep -m1 '"p99"' "$json" | sed 's/.*: *//; s/,//' | awk '{printf "%.3f", $1 / 1000}')
  rm -f "$json"
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  local cpu_us
  cpu_us=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v ops="$ops" -v s="$seconds" 'BEGIN {print (b - a) * 1000000 / hz / (ops * s)}')
  printf '| %s | %s | %s | %s | %.2f | %s |\n' "$shards" "$mode" "$ops" "$p99" "$cpu_us" "$hops"
}

echo "| shards | cluster-mode (client) | ops/s | p99 ms | server µs CPU/op | cross-core batches |"
echo "|---|---|---|---|---|---|"
for shards in $shard_counts; do
  run "$shards" no
  run "$shards" per-core
done
