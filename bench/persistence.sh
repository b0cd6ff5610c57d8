#!/usr/bin/env bash
# Snapshot save/load side by side: corekv vs redis-server, same data, same
# machine, one run. For each server: fill N random keys (redis-benchmark
# SET, 16-byte values), time SAVE, time BGSAVE under a concurrent SET load
# while sampling memory (PSS of the server and, for Redis, its fork child),
# then restart on the file and time the load until PING answers.
#
#   bench/persistence.sh [keys=1000000] [shards=2] [corekv binary]
set -euo pipefail
keys=${1:-1000000}
shards=${2:-2}
corekv=${3:-target/release/corekv}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
# Proportional set size in kB of a process and its children (a fork child's
# shared pages are counted once between them).
pss() {
  local total=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup 2>/dev/null || echo 0)))
  done
  echo "$total"
}
wait_ping() { until redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; do sleep 0.01; done; }
start() { # name port
  case $1 in
    corekv) "$corekv" --port "$2" --shards "$shards" --dir "$work/$1" --save "" >"$work/$1.log" 2>&1 & ;;
    redis) redis-server --port "$2" --dir "$work/$1" --save "" --appendonly no >"$work/$1.log" 2>&1 & ;;
  esac
  echo $!
}

printf '%-8s %9s %8s %9s %10s %11s %10s %9s %10s\n' server keys file_MB save_s save_MB/s bgsave_s base_MB peak_MB load_s
for name in corekv redis; do
  mkdir -p "$work/$name"
  port=$(free_port)
  pid=$(start $name "$port")
  wait_ping "$port"
  redis-benchmark -p "$port" -t set -r "$keys" -n $((keys * 3)) -P 64 -d 16 -q >/dev/null 2>&1
  count=$(redis-cli -p "$port" dbsize)

  t0=$(now); redis-cli -p "$port" save >/dev/null; t1=$(now)
  save=$(echo "$t1 - $t0" | bc -l)
  bytes=$(stat -c %s "$work/$name/dump.rdb")

  base=$(pss "$pid")
  redis-benchmark -p "$port" -t set -r "$keys" -n $((keys * 20)) -P 16 -d 16 -q >/dev/null 2>&1 &
  load=$!
  sleep 1
  saves=$(redis-cli -p "$port" info persistence | tr -d '\r' | awk -F: '/^rdb_saves:/ {print $2}')
  # Redis before 7 has no rdb_saves: fall back to LASTSAVE changes.
  t0=$(now); redis-cli -p "$port" bgsave >/dev/null
  peak=$(pss "$pid")
  while :; do
    m=$(pss "$pid"); [ "$m" -gt "$peak" ] && peak=$m
    info=$(redis-cli -p "$port" info persistence | tr -d '\r')
    if echo "$info" | grep -q '^rdb_bgsave_in_progress:0' &&
       [ "$(echo "$info" | awk -F: '/^rdb_saves:/ {print $2}')" != "$saves" ]; then break; fi
    sleep 0.005
  done
  t1=$(now)
  bgsave=$(echo "$t1 - $t0" | bc -l)
  kill "$load" 2>/dev/null || true; wait "$load" 2>/dev/null || true
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true

  port=$(free_port)
  t0=$(now); pid=$(start $name "$port"); wait_ping "$port"; t1=$(now)
  loadt=$(echo "$t1 - $t0" | bc -l)
  loaded=$(redis-cli -p "$port" dbsize)
  [ "$loaded" -ge "$count" ] || echo "warning: $name loaded $loaded of $count keys" >&2
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true

  printf '%-8s %9d %8.1f %9.3f %10.1f %11.3f %10.1f %9.1f %10.3f\n' "$name" "$count" \
    "$(echo "$bytes / 1000000" | bc -l)" "$save" "$(echo "$bytes / 1000000 / $save" | bc -l)" \
    "$bgsave" "$(echo "$base / 1024" | bc -l)" "$(echo "$peak / 1024" | bc -l)" "$loadt"
done
