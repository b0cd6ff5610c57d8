#!/usr/bin/env bash
# One connection at pipeline 1, so every request wakes an idle server:
# server CPU per request of redis-server, corekv --client-ring no and
# corekv --client-ring yes, all pinned to one CPU, interleaved rounds.
#
#   bench/idle-path.sh [server-cpu] [client-cpu] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpu=${1:-0}
client_cpu=${2:-1}
rounds=${3:-3}
corekv=${COREKV:-target/release/corekv}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
base=$((23000 + RANDOM % 1000))
taskset -c "$server_cpu" redis-server --port "$base" --save '' --appendonly no >/dev/null 2>&1 &
redis=$!
taskset -c "$server_cpu" "$corekv" --port $((base + 1)) --shards 1 --cpus "$server_cpu" --save '' --client-ring no >/dev/null 2>&1 &
reactor=$!
taskset -c "$server_cpu" "$corekv" --port $((base + 2)) --shards 1 --cpus "$server_cpu" --save '' --client-ring yes >/dev/null 2>&1 &
ring=$!
trap 'kill $redis $reactor $ring 2>/dev/null || true' EXIT
for p in $base $((base + 1)) $((base + 2)); do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
n=40000
for _ in $(seq "$rounds"); do
  for server in "redis-server $redis $base" "reactor $reactor $((base + 1))" "ring $ring $((base + 2))"; do
    read -r name pid port <<<"$server"
    t0=$(ticks "$pid")
    taskset -c "$client_cpu" redis-benchmark -p "$port" -q -t get -c 1 -d 100 -n "$n" -P 1 >/dev/null 2>&1
    t1=$(ticks "$pid")
    echo "$name $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.2f", (b - a) * 1000000 / hz / n}') µs CPU/request"
  done
done
