#!/usr/bin/env bash
# Bytes per element of an aggregate type, corekv --shards 1 vs redis-server.
# Two loads, each into a fresh pair of servers: N small elements into one
# key, then K keys of M elements. Prints markdown rows: used_memory (INFO
# memory) and process RSS (VmRSS of /proc/<pid>/status), each minus the
# empty server's baseline, divided by the number of elements loaded.
# corekv's used_memory is mimalloc's committed memory, Redis's is jemalloc's
# allocated bytes, so RSS is the like-for-like column.
#
#   bench/memory-types.sh TYPE [elements] [keys] [per-key]
#
# TYPE is hash or set; other types add a `gen` case below. Elements are
# small strings: hash fields "field:<i>" with values "value:<i>", set
# members "member:<i>".
set -euo pipefail
type=${1:?usage: bench/memory-types.sh hash|set [elements] [keys] [per-key]}
elements=${2:-1000000}
keys=${3:-10000}
per_key=${4:-100}
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
cargo build --release -q -p corekv

# gen KEYS PER_KEY: RESP commands loading KEYS keys of PER_KEY elements,
# 1000 elements per command.
gen() {
  python3 - "$type" "$1" "$2" <<'PY'
import sys
kind, nkeys, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
def cmd(args):
    out.write(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
for k in range(nkeys):
    key = b"key:%d" % k
    for start in range(0, per, 1000):
        ids = range(start, min(per, start + 1000))
        if kind == "hash":
            cmd([b"HSET", key] + [x for i in ids for x in (b"field:%d" % i, b"value:%d" % i)])
        elif kind == "set":
            cmd([b"SADD", key] + [b"member:%d" % i for i in ids])
        else:
            sys.exit("unknown type " + kind)
PY
}

used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }
rss() { awk '$1 == "VmRSS:" {print $2 * 1024}' "/proc/$1/status"; }
wait_up() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; }
per_elem() { echo "scale=1; ($1 - $2) / $3" | bc; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

# measure KEYS PER_KEY -> one markdown row
measure() {
  local nkeys=$1 per=$2 total=$(($1 * $2)) port_r port_c pid_r pid_c
  port_r=$((22000 + RANDOM % 1000))
  port_c=$((port_r + 1000))
  redis-server --port "$port_r" --save '' --appendonly no >/dev/null 2>&1 &
  pid_r=$!
  target/release/corekv --port "$port_c" --shards 1 >/dev/null 2>&1 &
  pid_c=$!
  pids=("$pid_r" "$pid_c")
  wait_up "$port_r"
  wait_up "$port_c"
  local base_used_r base_used_c base_rss_r base_rss_c
  base_used_r=$(used "$port_r") base_used_c=$(used "$port_c")
  base_rss_r=$(rss "$pid_r") base_rss_c=$(rss "$pid_c")
  gen "$nkeys" "$per" | redis-cli -p "$port_r" --pipe >/dev/null
  gen "$nkeys" "$per" | redis-cli -p "$port_c" --pipe >/dev/null
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
  printf '| %s | %s keys × %s | %s / %s | %s | %s | %s | %s | %.2f |\n' "$type" "$nkeys" "$per" "$enc_r" "$enc_c" \
    "$ur" "$uc" "$rr" "$rc" "$(echo "$rc / $rr" | bc -l)"
  kill "$pid_r" "$pid_c"
  wait "$pid_r" "$pid_c" 2>/dev/null || true
}

echo "| type | load | encoding (redis / corekv) | redis used_memory B/elem | corekv used_memory B/elem | redis RSS B/elem | corekv RSS B/elem | corekv/redis RSS |"
echo "|---|---|---|---|---|---|---|---|"
measure 1 "$elements"
measure "$keys" "$per_key"
