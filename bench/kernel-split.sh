#!/usr/bin/env bash
# Where a server's CPU goes per request, kernel and user: redis-server and
# corekv (one shard) pinned to the same CPU, redis-benchmark on another,
# `perf record -g` on the server during the load, each sample put in one
# bucket by its call chain (bench/scripts/split-samples.py), scaled to µs
# per request by the server's CPU time from /proc.
#
#   bench/kernel-split.sh [server-cpu] [client-cpu] [connections] [pipeline] [test]
#
# Defaults: 0 1 50 1 get. Needs perf and root (kernel call chains).
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpu=${1:-0}
client_cpu=${2:-1}
conns=${3:-50}
pipeline=${4:-1}
test=${5:-get}
corekv=${COREKV:-target/release/corekv}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
dir=$(mktemp -d)
base=$((24000 + RANDOM % 1000))
taskset -c "$server_cpu" redis-server --port "$base" --save '' --appendonly no >/dev/null 2>&1 &
redis=$!
taskset -c "$server_cpu" "$corekv" --port $((base + 1)) --shards 1 --cpus "$server_cpu" --save '' >/dev/null 2>&1 &
ring=$!
trap 'kill $redis $ring 2>/dev/null || true; rm -rf "$dir"' EXIT
for p in $base $((base + 1)); do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
n=$((pipeline > 1 ? 2000000 : 400000))
for server in "redis-server $redis $base" "corekv $ring $((base + 1))"; do
  read -r name pid port <<<"$server"
  taskset -c "$client_cpu" redis-benchmark -p "$port" -q -t set -c "$conns" -d 100 -r 100000 -n 200000 -P 16 >/dev/null 2>&1
  taskset -c "$client_cpu" redis-benchmark -p "$port" -q -t "$test" -c "$conns" -d 100 -r 100000 -n "$n" -P "$pipeline" \
    >"$dir/$name.bench" 2>&1 &
  bench=$!
  sleep 1
  t0=$(ticks "$pid")
  perf record -q -g -e cpu-clock -F 4000 -p "$pid" -o "$dir/$name.data" -- sleep 4 >/dev/null 2>&1
  t1=$(ticks "$pid")
  wait "$bench"
  rps=$(grep -o '[0-9.]* requests per second' "$dir/$name.bench" | awk '{print $1}')
  us=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v r="$rps" 'BEGIN {printf "%.2f", (b - a) / hz / 4 * 1000000 / r}')
  echo "== $name: $rps requests/s, $us µs CPU/request (4 s of the run)"
  perf script -i "$dir/$name.data" -F ip,sym 2>/dev/null | python3 bench/scripts/split-samples.py "$us"
done
