#!/usr/bin/env bash
# Persistence side by side: corekv --shards 1 vs redis-server, both pinned to
# the same CPU, clients on another. Prints markdown tables for:
#   1. SAVE and start-up load of N small string keys (time, MB/s of the file)
#   2. the same for M keys of mixed types (strings, hashes, sets, sorted
#      sets, lists; small encodings, every 1000th key a large one)
#   3. BGSAVE under a 100% write load: peak memory (proportional set size of
#      the server and, for Redis, its fork child) over the memory before the
#      save, and the writers' p99 with and without saves running
#   4. AOF appendfsync everysec: SET throughput against appendonly no
#
#   bench/persistence.sh [server-cpu] [client-cpu] [small-keys] [mixed-keys] [sections]
#
# Defaults: CPU 0 for the servers, CPU 1 for clients, 10000000 small keys,
# 1000000 mixed keys, sections "save mixed bgsave aof". Only bash, awk,
# redis-cli and redis-benchmark are needed.
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpu=${1:-0}
client_cpu=${2:-1}
small_keys=${3:-10000000}
mixed_keys=${4:-1000000}
sections=${5:-save mixed bgsave aof}
target=${CARGO_TARGET_DIR:-target}
command -v redis-benchmark >/dev/null || scripts/setup-test-deps.sh
cargo build --release -j2 -q -p corekv
corekv=$target/release/corekv
work=$(mktemp -d)
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
wait_up() { for _ in $(seq 600); do redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return; sleep 0.05; done; }
info_field() { redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'; }
mb_per_s() { awk -v b="$1" -v ms="$2" 'BEGIN { printf "%.0f", (ms > 0) ? b / 1048576 / (ms / 1000) : 0 }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
secs() { awk -v ms="$1" 'BEGIN { printf "%.2f", ms / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

# start NAME PORT DIR [extra args...]: a pinned server on PORT with its
# files in DIR; sets $pid.
start() {
  local name=$1 port=$2 dir=$3
  shift 3
  mkdir -p "$dir"
  if [ "$name" = redis ]; then
    taskset -c "$server_cpu" redis-server --port "$port" --dir "$dir" --dbfilename dump.rdb "$@" >"$dir/log" 2>&1 &
  else
    taskset -c "$server_cpu" "$corekv" --port "$port" --shards 1 --cpus "$server_cpu" --dir "$dir" --dbfilename dump.rdb "$@" >"$dir/log" 2>&1 &
  fi
  pid=$!
  pids+=("$pid")
  wait_up "$port"
}

stop() { redis-cli -p "$1" shutdown nosave >/dev/null 2>&1 || true; wait "$2" 2>/dev/null || true; }

# Generators of RESP commands, 100 keys or 100 elements per command.
gen_small() {
  awk -v n="$1" 'function bulk(s) { return "$" length(s) "\r\n" s "\r\n" }
    BEGIN { ORS = ""; for (i = 0; i < n; i += 100) { m = i + 100 < n ? 100 : n - i
      out = "*" (1 + 2 * m) "\r\n" bulk("MSET")
      for (j = i; j < i + m; j++) out = out bulk("key:" j) bulk("value:" j)
      print out } }'
}
# gen_sized N: N keys with 100-byte values, the size the writers use, so
# the writes of the BGSAVE section do not grow the dataset.
gen_sized() {
  awk -v n="$1" 'function bulk(s) { return "$" length(s) "\r\n" s "\r\n" }
    BEGIN { ORS = ""; pad = sprintf("%100s", ""); gsub(/ /, "v", pad)
      for (i = 0; i < n; i += 100) { m = i + 100 < n ? 100 : n - i
      out = "*" (1 + 2 * m) "\r\n" bulk("MSET")
      for (j = i; j < i + m; j++) out = out bulk("key:" sprintf("%012d", j)) bulk(pad)
      print out } }'
}
gen_mixed() {
  awk -v n="$1" 'function bulk(s) { return "$" length(s) "\r\n" s "\r\n" }
    BEGIN { ORS = ""; pad = sprintf("%90s", ""); gsub(/ /, "x", pad)
      for (i = 0; i < n; i++) {
        kind = i % 5; size = i % 1000 == 0 ? 1000 : 10; key = "key:" i
        if (kind == 0) { print "*3\r\n" bulk("SET") bulk(key) bulk(pad i); continue }
        cmd = kind == 1 ? "HSET" : kind == 2 ? "SADD" : kind == 3 ? "ZADD" : "RPUSH"
        per = (kind == 1 || kind == 3) ? 2 : 1
        out = "*" (2 + per * size) "\r\n" bulk(cmd) bulk(key)
        for (j = 0; j < size; j++) {
          if (kind == 1) out = out bulk("field:" j) bulk("value:" j)
          else if (kind == 2) out = out bulk(i % 2 ? j : "member:" j)
          else if (kind == 3) out = out bulk(j * 1.5) bulk("member:" j)
          else out = out bulk("element:" j)
        }
        print out } }'
}

# save_and_load NAME GENERATOR COUNT -> one markdown row
save_and_load() {
  local name=$1 gen=$2 count=$3 port dir t0 t1 save_ms load_ms bytes keys
  port=$((23000 + RANDOM % 1000))
  dir=$work/$name-$gen
  start "$name" "$port" "$dir" --save ''
  "$gen" "$count" | taskset -c "$client_cpu" redis-cli -p "$port" --pipe >/dev/null
  t0=$(now_ms)
  redis-cli -p "$port" save >/dev/null
  t1=$(now_ms)
  save_ms=$((t1 - t0))
  bytes=$(stat -c %s "$dir/dump.rdb")
  stop "$port" "$pid"
  t0=$(now_ms)
  start "$name" "$port" "$dir" --save ''
  while [ "$(info_field "$port" persistence loading)" != 0 ]; do sleep 0.02; done
  t1=$(now_ms)
  load_ms=$((t1 - t0))
  keys=$(redis-cli -p "$port" dbsize)
  stop "$port" "$pid"
  rm -f "$dir/dump.rdb"
  echo "| $name | $keys | $(mb "$bytes") | $(secs $save_ms) | $(mb_per_s "$bytes" $save_ms) | $(secs $load_ms) | $(mb_per_s "$bytes" $load_ms) |"
}

# Proportional set size of a server and its children (Redis's fork), kB.
pss() {
  local total=0 p
  for p in "$1" $(cat "/proc/$1/task/"*/children 2>/dev/null); do
    total=$((total + $(awk '$1 == "Pss:" {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# p99 (ms) of redis-benchmark SET over the loaded keys, 50 clients.
writers_p99() {
  taskset -c "$client_cpu" redis-benchmark -p "$1" -t set -c 50 -d 100 -r "$2" -n "$3" --csv 2>/dev/null |
    awk -F'","' 'NR == 2 {print $7}'
}

# bgsave NAME KEYS -> one markdown row
bgsave_under_load() {
  local name=$1 keys=$2 port dir base peak p99_idle p99_save bench saves=0 now
  port=$((24000 + RANDOM % 1000))
  dir=$work/$name-bgsave
  start "$name" "$port" "$dir" --save ''
  gen_sized "$keys" | taskset -c "$client_cpu" redis-cli -p "$port" --pipe >/dev/null
  p99_idle=$(writers_p99 "$port" "$keys" 1000000)
  base=$(pss "$pid")
  peak=$base
  writers_p99 "$port" "$keys" 1000000 >"$dir/p99" &
  bench=$!
  while kill -0 "$bench" 2>/dev/null; do
    if [ "$(info_field "$port" persistence rdb_bgsave_in_progress)" = 0 ]; then
      redis-cli -p "$port" bgsave >/dev/null && saves=$((saves + 1))
    fi
    now=$(pss "$pid")
    [ "$now" -gt "$peak" ] && peak=$now
    sleep 0.05
  done
  wait "$bench" || true
  p99_save=$(cat "$dir/p99")
  stop "$port" "$pid"
  echo "| $name | $keys | $((base / 1024)) | $((peak / 1024)) | $(awk -v a="$peak" -v b="$base" 'BEGIN { printf "%.0f%%", (a - b) * 100 / b }') | $saves | $p99_idle | $p99_save |"
}

# aof NAME -> one markdown row: SET ops/s without and with AOF everysec
aof_cost() {
  local name=$1 port dir off on
  port=$((25000 + RANDOM % 1000))
  run_set() {
    taskset -c "$client_cpu" redis-benchmark -p "$port" -q -t set -c 50 -d 100 -r 100000 -n 2000000 -P 16 2>/dev/null |
      tr '\r' '\n' | grep 'requests per second' | tail -1 | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/'
  }
  dir=$work/$name-aof-off
  start "$name" "$port" "$dir" --save '' --appendonly no
  off=$(run_set)
  stop "$port" "$pid"
  dir=$work/$name-aof-on
  start "$name" "$port" "$dir" --save '' --appendonly yes --appendfsync everysec
  on=$(run_set)
  stop "$port" "$pid"
  echo "| $name | $off | $on | $(ratio "$on" "$off") |"
}

for section in $sections; do
  case $section in
    save | mixed)
      gen=gen_small count=$small_keys
      [ "$section" = mixed ] && gen=gen_mixed count=$mixed_keys
      echo
      echo "### SAVE and load: $count ${section/save/small string} keys"
      echo
      echo "| server | keys | file MB | SAVE s | SAVE MB/s | load s | load MB/s |"
      echo "|---|---|---|---|---|---|---|"
      save_and_load redis "$gen" "$count"
      save_and_load corekv "$gen" "$count"
      ;;
    bgsave)
      keys=$((small_keys / 5))
      echo
      echo "### BGSAVE under a 100% SET load over $keys keys (saves back to back)"
      echo
      echo "| server | keys | PSS before MB | peak PSS MB | extra | saves | writers p99 ms, no save | writers p99 ms, saving |"
      echo "|---|---|---|---|---|---|---|---|"
      bgsave_under_load redis "$keys"
      bgsave_under_load corekv "$keys"
      ;;
    aof)
      echo
      echo "### SET throughput with AOF everysec (redis-benchmark -t set -P 16 -c 50 -d 100)"
      echo
      echo "| server | appendonly no ops/s | appendonly yes, everysec ops/s | ratio |"
      echo "|---|---|---|---|"
      aof_cost redis
      aof_cost corekv
      ;;
    *) echo "unknown section $section" >&2; exit 2 ;;
  esac
done
