#!/usr/bin/env bash
# SET throughput with and without one redis-server replica attached, corekv
# (1 shard) beside redis-server, each on CPU 0; redis-benchmark and the
# replica on CPU 1. Server CPU per request from /proc (utime+stime).
#   bench/replication-steady.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
corekv=${COREKV:-target/release/corekv}
[ -x "$corekv" ] || cargo build --release -j2 -q -p corekv
clk=$(getconf CLK_TCK)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
one() {
  local kind=$1 replica=$2 port dir spid rpid="" t0 t1 ops
  port=$(free_port); dir=$(mktemp -d)
  if [ "$kind" = corekv ]; then
    taskset -c 0 "$corekv" --port "$port" --shards 1 --save "" --dir "$dir" >/dev/null 2>&1 &
  else
    taskset -c 0 redis-server --port "$port" --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
  fi
  spid=$!
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
  if [ "$replica" = with ]; then
    local rport; rport=$(free_port); mkdir -p "$dir/r"
    taskset -c 1 redis-server --port "$rport" --save "" --dir "$dir/r" --replicaof 127.0.0.1 "$port" >/dev/null 2>&1 &
    rpid=$!
    until redis-cli -p "$rport" info replication 2>/dev/null | grep -q master_link_status:up; do sleep 0.1; done
  fi
  t0=$(awk '{print $14 + $15}' "/proc/$spid/stat")
  ops=$(taskset -c 1 redis-benchmark -p "$port" -t set -n 1000000 -P 16 -c 50 -r 100000 -d 100 -q 2>/dev/null \
    | tr '\r' '\n' | grep "requests per second" | tail -1 | awk '{print $2}')
  t1=$(awk '{print $14 + $15}' "/proc/$spid/stat")
  echo "| $kind | $replica | $ops | $(awk -v a="$t0" -v b="$t1" -v c="$clk" 'BEGIN { printf "%.2f", (b - a) / c * 1e6 / 1000000 }') |"
  kill "$spid" $rpid 2>/dev/null; wait "$spid" $rpid 2>/dev/null || true; rm -rf "$dir"
}
echo "| server | replica | SET/s | server CPU µs/request |"
echo "|---|---|---|---|"
for _ in $(seq "$rounds"); do
  for kind in redis corekv; do for r in without with; do one "$kind" "$r"; done; done
done
