#!/usr/bin/env bash
# Server CPU per request at a fixed offered load (open loop, corekv-bench
# --rate), split into user and kernel ticks, as the number of shards grows
# while the load stays the same (so most shards are mostly idle):
# corekv --cluster-mode per-core with a cluster client, then one
# redis-server at the same rates. Needs as many CPUs as the largest KS plus
# the client CPUs CL. Run on the 16-core host (bench/RESULTS.md):
#   KS="1 2 4 8 14" RATES="50000 200000" CL=14-15 bench/idle-shards.sh
# Build first: cargo build --release -p corekv -p corekv-bench
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=${BIN_DIR:-$PWD/target/release}:$PATH
KS=${KS:-"1 8 14"}
RATES=${RATES:-"50000 200000"}
CL=${CL:-14-15}
T=${T:-5}
# Servers started here stop with the script, whatever ends it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
up() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; }
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
# name pid port [--cluster]
measure() {
  local rate u1 s1 u2 s2 out
  for rate in $RATES; do
    read -r u1 s1 < <(ticks "$2")
    out=$(taskset -c "$CL" corekv-bench -p "$3" -t 2 ${4:+"$4"} --rate "$rate" --warmup 1 --test-time "$T" \
      --seed 1 --ratio 1:10 -d 32 -c 25 --key-minimum 0 --key-maximum 99999 --server-pid "$2" 2>&1)
    read -r u2 s2 < <(ticks "$2")
    echo "$1 rate=$rate user_ticks=$((u2 - u1)) sys_ticks=$((s2 - s1)) $(grep -o 'server CPU.*' <<<"$out")"
  done
}
preload() {
  corekv-bench -p "$1" -t 1 ${2:+"$2"} --preload --command PING -n 1 -c 16 --seed 1 \
    --key-minimum 0 --key-maximum 99999 -d 32 >/dev/null 2>&1
}
for k in $KS; do
  last=$((k - 1))
  port=$((20000 + k * 100))
  taskset -c "0-$last" corekv --port "$port" --shards "$k" --cpus "0-$last" --save '' \
    --cluster-mode per-core --cluster-port-base $((port + 1)) >"/tmp/idle-shards-$k.log" 2>&1 &
  pid=$!
  up "$port"
  preload "$port" --cluster
  measure "corekv shards=$k" "$pid" "$port" --cluster
  kill "$pid"
  wait "$pid" || true
done
taskset -c 0 redis-server --port 29999 --save '' --appendonly no >/dev/null 2>&1 &
pid=$!
up 29999
preload 29999
measure "redis one process" "$pid" 29999
kill "$pid"
wait "$pid" || true
