#!/usr/bin/env bash
# Bytes per element of the aggregate types, corekv --shards 1 vs redis-server.
# Each load goes into a fresh pair of servers: N small elements into one key
# (the large encodings), then K keys of M elements (the small encodings).
# Prints markdown rows: used_memory (INFO memory) and process RSS (VmRSS of
# /proc/<pid>/status), each minus the empty server's baseline, divided by
# the number of elements loaded. corekv's used_memory counts the bytes its
# allocations asked for, Redis's is jemalloc's allocated size classes, so
# RSS is the like-for-like column.
#
#   bench/memory-types.sh [types] [elements] [keys] [per-key]
#
# types: any of "hash set zset list" (default all four). Elements are small
# strings: hash fields "field:<i>" with values "value:<i>", set and zset
# members "member:<i>" (zset scores <i>), list elements "element:<i>".
# SERVER_ARGS is passed to both servers, e.g.
#   SERVER_ARGS="--list-compress-depth 1" bench/memory-types.sh list
# Only bash, awk and redis-cli: no other tools needed.
set -euo pipefail
types=${1:-hash set zset list}
elements=${2:-1000000}
keys=${3:-10000}
per_key=${4:-100}
read -r -a server_args <<<"${SERVER_ARGS:-}"
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
cargo build --release -q -p corekv

# gen TYPE KEYS PER_KEY: RESP commands loading KEYS keys of PER_KEY
# elements, 1000 elements per command.
gen() {
  awk -v kind="$1" -v nkeys="$2" -v per="$3" '
    function bulk(s) { return "$" length(s) "\r\n" s "\r\n" }
    BEGIN {
      ORS = ""
      cmd = kind == "hash" ? "HSET" : kind == "set" ? "SADD" : kind == "zset" ? "ZADD" : kind == "list" ? "RPUSH" : ""
      if (cmd == "") { print "unknown type " kind > "/dev/stderr"; exit 2 }
      per_elem = (kind == "hash" || kind == "zset") ? 2 : 1
      for (k = 0; k < nkeys; k++) {
        for (start = 0; start < per; start += 1000) {
          end = start + 1000 < per ? start + 1000 : per
          out = "*" (2 + per_elem * (end - start)) "\r\n" bulk(cmd) bulk("key:" k)
          for (i = start; i < end; i++) {
            if (kind == "hash") out = out bulk("field:" i) bulk("value:" i)
            else if (kind == "set") out = out bulk("member:" i)
            else if (kind == "zset") out = out bulk(i) bulk("member:" i)
            else out = out bulk("element:" i)
          }
          print out
        }
      }
    }'
}

used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }
rss() { awk '$1 == "VmRSS:" {print $2 * 1024}' "/proc/$1/status"; }
wait_up() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; }
per_elem() { awk -v now="$1" -v base="$2" -v n="$3" 'BEGIN { printf "%.1f", (now - base) / n }'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

# measure TYPE KEYS PER_KEY -> one markdown row
measure() {
  local type=$1 nkeys=$2 per=$3 total=$(($2 * $3)) port_r port_c pid_r pid_c
  port_r=$((22000 + RANDOM % 1000))
  port_c=$((port_r + 1000))
  redis-server --port "$port_r" --save '' --appendonly no "${server_args[@]}" >/dev/null 2>&1 &
  pid_r=$!
  target/release/corekv --port "$port_c" --shards 1 "${server_args[@]}" >/dev/null 2>&1 &
  pid_c=$!
  pids=("$pid_r" "$pid_c")
  wait_up "$port_r"
  wait_up "$port_c"
  local base_used_r base_used_c base_rss_r base_rss_c
  base_used_r=$(used "$port_r") base_used_c=$(used "$port_c")
  base_rss_r=$(rss "$pid_r") base_rss_c=$(rss "$pid_c")
  gen "$type" "$nkeys" "$per" | redis-cli -p "$port_r" --pipe >/dev/null
  gen "$type" "$nkeys" "$per" | redis-cli -p "$port_c" --pipe >/dev/null
  # Let both allocators settle: freed pages are purged lazily, on later
  # allocator activity (mimalloc) or after a decay time (jemalloc).
  for _ in $(seq 20); do
    redis-cli -p "$port_r" set settle x >/dev/null
    redis-cli -p "$port_c" set settle x >/dev/null
    sleep 0.1
  done
  local enc_r enc_c ur uc rr rc
  enc_r=$(redis-cli -p "$port_r" object encoding key:0)
  enc_c=$(redis-cli -p "$port_c" object encoding key:0)
  ur=$(per_elem "$(used "$port_r")" "$base_used_r" "$total")
  uc=$(per_elem "$(used "$port_c")" "$base_used_c" "$total")
  rr=$(per_elem "$(rss "$pid_r")" "$base_rss_r" "$total")
  rc=$(per_elem "$(rss "$pid_c")" "$base_rss_c" "$total")
  printf '| %s | %s keys × %s | %s / %s | %s | %s | %s | %s | %s |\n' "$type" "$nkeys" "$per" "$enc_r" "$enc_c" \
    "$ur" "$uc" "$rr" "$rc" "$(awk -v c="$rc" -v r="$rr" 'BEGIN { printf "%.2f", c / r }')"
  kill "$pid_r" "$pid_c"
  wait "$pid_r" "$pid_c" 2>/dev/null || true
}

echo "| type | load | encoding (redis / corekv) | redis used_memory B/elem | corekv used_memory B/elem | redis RSS B/elem | corekv RSS B/elem | corekv/redis RSS |"
echo "|---|---|---|---|---|---|---|---|"
for type in $types; do
  measure "$type" 1 "$elements"
  measure "$type" "$keys" "$per_key"
done
