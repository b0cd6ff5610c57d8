#!/usr/bin/env bash
# MULTI/EXEC and EVALSHA, corekv vs redis-server in the same run: each
# server pinned to the same CPU(s), corekv-bench (closed loop) pinned to
# another. Prints a markdown table: transactions/s of each, the ratio, and
# server CPU time per transaction (utime+stime from /proc over the run),
# the median of alternating rounds.
#
#   bench/transactions.sh [rounds] [seconds]
#
# Workloads (every client picks random keys from 100k):
#   multi3   MULTI; INCR k; INCR k; GET k; EXEC          one shard
#   evalsha  EVALSHA <INCR script> 1 k                   one shard
#   multi3x  MULTI; INCR k; INCR bk; INCR ck; EXEC       corekv --shards 2:
#            the three keys land on both shards (3 of 4 transactions span
#            them); Redis runs the same commands on its one thread
#   evalshax EVALSHA <INCR both> 2 k bk                  --shards 2, likewise
#   mset/mget of k and bk                                --shards 2, likewise
#            (half of them span both shards: each is one coordinator unit)
# Single-shard rows: both servers on CPU 0, the client on CPU 1.
# Cross-shard rows: corekv's two shards on CPUs 0 and 1, Redis on CPU 0,
# the client on CPU 1 for both (so it competes with one corekv shard):
# compare CPU per transaction there, not throughput.
# COREKV / BENCH pick the binaries (default target/release/, built).
# BASELINE=path/to/an/older/corekv adds a table: the 2-shard MSET/MGET rows
# on that binary vs this one, alternating in the same run (what atomicity
# costs over a plain split).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-5}
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
corekv=${COREKV:-target/release/corekv}
bench=${BENCH:-target/release/corekv-bench}
[[ -n ${COREKV:-} && -n ${BENCH:-} ]] || cargo build --release -q -p corekv -p corekv-bench
base=$((22000 + RANDOM % 1000))
pids=()
declare -A port pid
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

start() { # name cpus args...
  local name=$1 cpus=$2 p=$((base + ${#pids[@]}))
  shift 2
  taskset -c "$cpus" "$@" --port "$p" >/dev/null 2>&1 &
  pids+=($!)
  port[$name]=$p
  pid[$name]=$!
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "$name did not start" >&2
  exit 1
}
start redis 0 redis-server --save '' --appendonly no
start one 0 "$corekv" --shards 1 --cpus 0 --save ''
start two 0,1 "$corekv" --shards 2 --cpus 0,1 --save ''
[[ -z ${BASELINE:-} ]] || start base 0,1 "$BASELINE" --shards 2 --cpus 0,1 --save ''

incr1='return redis.call("INCR", KEYS[1])'
incr2='redis.call("INCR", KEYS[1]) return redis.call("INCR", KEYS[2])'
for p in "${port[@]}"; do
  redis-cli -p "$p" SCRIPT LOAD "$incr1" >/dev/null
  redis-cli -p "$p" SCRIPT LOAD "$incr2" >/dev/null
done
sha1=$(redis-cli -p "${port[redis]}" SCRIPT LOAD "$incr1")
sha2=$(redis-cli -p "${port[redis]}" SCRIPT LOAD "$incr2")

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# run PID PORT COMMAND -> "tx_per_sec cpu_us_per_tx"
run() {
  local server=$1 at=$2 command=$3 t0 t1 out
  t0=$(ticks "$server")
  out=$(taskset -c 1 "$bench" -p "$at" -t 1 -c 50 --test-time "$seconds" --key-maximum 99999 \
    --command "$command" 2>/dev/null | awk '$1 == "Totals" {print $2}')
  t1=$(ticks "$server")
  echo "$out $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v r="$out" -v s="$seconds" \
    'BEGIN {print (b - a) * 1000000 / hz / (r * s)}')"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| workload | Redis tx/s | corekv tx/s | corekv/Redis | Redis CPU µs/tx | corekv CPU µs/tx | corekv/Redis CPU |"
echo "|---|---|---|---|---|---|---|"
row() { # label corekv-name command
  local label=$1 name=$2 command=$3 r c
  local -a rt rc ct cc
  for _ in $(seq "$rounds"); do
    read -r r c < <(run "${pid[redis]}" "${port[redis]}" "$command")
    rt+=("$r") rc+=("$c")
    read -r r c < <(run "${pid[$name]}" "${port[$name]}" "$command")
    ct+=("$r") cc+=("$c")
  done
  local mrt mct mrc mcc
  mrt=$(printf '%s\n' "${rt[@]}" | median)
  mct=$(printf '%s\n' "${ct[@]}" | median)
  mrc=$(printf '%s\n' "${rc[@]}" | median)
  mcc=$(printf '%s\n' "${cc[@]}" | median)
  awk -v l="$label" -v rt="$mrt" -v ct="$mct" -v rc="$mrc" -v cc="$mcc" 'BEGIN {
    printf "| %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f |\n", l, rt, ct, ct / rt, rc, cc, cc / rc }'
}
row "MULTI; INCR; INCR; GET; EXEC (1 shard)" one "MULTI; INCR __key__; INCR __key__; GET __key__; EXEC"
row "EVALSHA INCR, 1 key (1 shard)" one "EVALSHA $sha1 1 __key__"
row "MULTI; 3 × INCR; EXEC (2 shards)" two "MULTI; INCR __key__; INCR b__key__; INCR c__key__; EXEC"
row "EVALSHA INCR × 2, 2 keys (2 shards)" two "EVALSHA $sha2 2 __key__ b__key__"
row "MSET, 2 keys (2 shards)" two "MSET __key__ 1 b__key__ 2"
row "MGET, 2 keys (2 shards)" two "MGET __key__ b__key__"

[[ -n ${BASELINE:-} ]] || exit 0
echo
echo "| 2 shards | baseline tx/s | corekv tx/s | baseline CPU µs/tx | corekv CPU µs/tx | corekv/baseline CPU |"
echo "|---|---|---|---|---|---|"
for command in "MSET __key__ 1 b__key__ 2" "MGET __key__ b__key__"; do
  bt=() bc=() nt=() nc=()
  for _ in $(seq "$rounds"); do
    read -r r c < <(run "${pid[base]}" "${port[base]}" "$command")
    bt+=("$r") bc+=("$c")
    read -r r c < <(run "${pid[two]}" "${port[two]}" "$command")
    nt+=("$r") nc+=("$c")
  done
  awk -v l="${command%% *}" -v bt="$(printf '%s\n' "${bt[@]}" | median)" -v nt="$(printf '%s\n' "${nt[@]}" | median)" \
    -v bc="$(printf '%s\n' "${bc[@]}" | median)" -v nc="$(printf '%s\n' "${nc[@]}" | median)" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.2f | %.2f | %.2f |\n", l, bt, nt, bc, nc, nc / bc }'
done
