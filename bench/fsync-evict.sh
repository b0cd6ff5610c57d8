#!/usr/bin/env bash
# Two costs a write can carry, corekv vs redis-server side by side, both
# servers pinned to the same CPU, redis-benchmark pinned to another,
# alternating rounds, medians:
#   always: SET with `appendonly yes, appendfsync always` (4 connections,
#           8 writes in flight each): acknowledged writes/s
#   evict:  SET of new 1 KiB values under `maxmemory 100mb allkeys-lru`
#           (10 connections, pipeline 16) once the memory is full, so every
#           SET evicts: SETs/s
#
#   bench/fsync-evict.sh [server-cpu] [client-cpu] [rounds] [sections]
#
# sections: "always evict" (default). SHARDS=n runs corekv with n shards
# (default 1; with more than one the server is pinned to nothing). COREKV=path
# picks the binary (default target/release/corekv, built).
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpu=${1:-0}
client_cpu=${2:-1}
rounds=${3:-5}
sections=${4:-always evict}
shards=${SHARDS:-1}
command -v redis-benchmark >/dev/null || scripts/setup-test-deps.sh
corekv=${COREKV:-target/release/corekv}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
work=$(mktemp -d)
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

wait_up() {
  for _ in $(seq 200); do redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return; sleep 0.05; done
  echo "no server on port $1" >&2
  exit 1
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

# start NAME PORT [args...]: a server with its files in its own directory.
start() {
  local name=$1 port=$2 dir=$work/$1-$2
  shift 2
  mkdir -p "$dir"
  if [[ $name == redis ]]; then
    taskset -c "$server_cpu" redis-server --port "$port" --dir "$dir" --save '' "$@" >"$dir/log" 2>&1 &
  elif [[ $shards == 1 ]]; then
    taskset -c "$server_cpu" "$corekv" --port "$port" --shards 1 --cpus "$server_cpu" --dir "$dir" --save '' "$@" >"$dir/log" 2>&1 &
  else
    "$corekv" --port "$port" --shards "$shards" --dir "$dir" --save '' "$@" >"$dir/log" 2>&1 &
  fi
  pids+=($!)
  wait_up "$port"
}

# bench PORT ARGS... -> requests per second
bench() {
  local port=$1
  shift
  taskset -c "$client_cpu" redis-benchmark -p "$port" -q "$@" 2>/dev/null |
    tr '\r' '\n' | grep 'requests per second' | tail -1 | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/'
}

# alternate ARGS...: $rounds rounds of redis-benchmark ARGS, redis then
# corekv, each server's ops/s appended to its file.
alternate() {
  local name port
  for _ in $(seq "$rounds"); do
    for name in redis corekv; do
      port=port_$name
      bench "${!port}" "$@" >>"$work/$name.txt"
    done
  done
}

port_redis=$((26000 + RANDOM % 1000))
port_corekv=$((port_redis + 1000))
for section in $sections; do
  : >"$work/redis.txt"
  : >"$work/corekv.txt"
  case $section in
    always)
      start redis "$port_redis" --appendonly yes --appendfsync always
      start corekv "$port_corekv" --appendonly yes --appendfsync always
      alternate -t set -c 4 -P 8 -n 40000 -d 100 -r 100000
      echo
      echo "### appendfsync always: acknowledged SETs/s (redis-benchmark -t set -c 4 -P 8 -d 100, corekv --shards $shards)"
      ;;
    evict)
      start redis "$port_redis" --maxmemory 100mb --maxmemory-policy allkeys-lru
      start corekv "$port_corekv" --maxmemory 100mb --maxmemory-policy allkeys-lru
      # A first pass fills the memory (not counted).
      rounds=1 alternate -t set -c 10 -P 16 -d 1024 -r 100000000 -n 300000
      : >"$work/redis.txt"
      : >"$work/corekv.txt"
      alternate -t set -c 10 -P 16 -d 1024 -r 100000000 -n 300000
      echo
      echo "### SET under maxmemory 100mb allkeys-lru, every SET evicting (redis-benchmark -t set -c 10 -P 16 -d 1024 -r 100000000 -n 300000, corekv --shards $shards)"
      ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
  r=$(cut -d' ' -f1 "$work/redis.txt" | median)
  c=$(cut -d' ' -f1 "$work/corekv.txt" | median)
  echo
  echo "| server | rounds (ops/s) | median ops/s | corekv/redis |"
  echo "|---|---|---|---|"
  echo "| redis | $(cut -d' ' -f1 "$work/redis.txt" | tr '\n' ' ') | $r | |"
  echo "| corekv | $(cut -d' ' -f1 "$work/corekv.txt" | tr '\n' ' ') | $c | $(ratio "$c" "$r") |"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
done
