#!/usr/bin/env bash
# Memory per sorted-set element: corekv (--shards 1) against redis-server,
# each loaded the same way through redis-cli --pipe. Bytes per element are
# (after - empty server) / elements, from INFO's used_memory and from VmRSS.
#
#   bench/memory-zset.sh [--elements 1000000] [--keys 10000] [--per-key 100]
#                        [--header] [--binary target/release/corekv]
# Prints one markdown table row per workload:
#   seq:   one set, members member:N with score N, loaded in order
#   rand:  one set, members member:N with random fractional scores
#   small: --keys sets of --per-key members (the listpack encoding)
set -euo pipefail
cd "$(dirname "$0")/.."
elements=1000000
keys=10000
per_key=100
header=0
binary=target/release/corekv
while [ $# -gt 0 ]; do
  case $1 in
    --elements) elements=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --per-key) per_key=$2; shift 2 ;;
    --header) header=1; shift ;;
    --binary) binary=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
[ "$binary" != target/release/corekv ] || cargo build --release -q -p corekv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((23000 + RANDOM % 1000))

# gen WORKLOAD -> RESP commands on stdout (ZADD in batches of 100 pairs)
gen() {
  awk -v mode="$1" -v n="$elements" -v keys="$keys" -v per="$per_key" '
    function bulk(s) { printf "$%d\r\n%s\r\n", length(s), s }
    function zadd(key, first, count, scored,   j) {
      printf "*%d\r\n", 2 + 2 * count; bulk("ZADD"); bulk(key)
      for (j = first; j < first + count; j++) {
        bulk(scored ? sprintf("%.6f", rand() * 1000000) : j); bulk("member:" j)
      }
    }
    BEGIN {
      srand(7)
      if (mode == "small") {
        for (k = 0; k < keys; k++) zadd("zset:" k, 0, per, 0)
      } else {
        for (i = 0; i < n; i += 100) zadd("big", i, (n - i < 100 ? n - i : 100), mode == "rand")
      }
    }'
}

used() { redis-cli -p "$port" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'; }
rss() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$1/status"; }

# measure SERVER WORKLOAD -> "used_bytes_per_element rss_bytes_per_element encoding"
measure() {
  local server=$1 workload=$2 pid
  if [ "$server" = redis ]; then
    redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  else
    "$binary" --port "$port" --shards 1 >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local u0 r0 u1 r1 n enc
  u0=$(used); r0=$(rss "$pid")
  redis-cli -p "$port" --pipe <"$work/$workload.resp" >/dev/null
  sleep 1
  u1=$(used); r1=$(rss "$pid")
  if [ "$workload" = small ]; then
    n=$((keys * per_key)); enc=$(redis-cli -p "$port" object encoding zset:0)
  else
    n=$(redis-cli -p "$port" zcard big); enc=$(redis-cli -p "$port" object encoding big)
  fi
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  awk -v u0="$u0" -v u1="$u1" -v r0="$r0" -v r1="$r1" -v n="$n" -v e="$enc" \
    'BEGIN {printf "%.1f %.1f %s %d", (u1 - u0) / n, (r1 - r0) / n, e, n}'
}

if [ "$header" = 1 ]; then
  echo "| type | workload | elements | encoding | corekv used B/el | redis used B/el | corekv RSS B/el | redis RSS B/el |"
  echo "|---|---|---|---|---|---|---|---|"
fi
for workload in seq rand small; do
  gen "$workload" >"$work/$workload.resp"
  read -r cu cr cenc n <<<"$(measure corekv "$workload")"
  read -r ru rr renc _ <<<"$(measure redis "$workload")"
  case $workload in
    seq) label="1 set, scores in order" ;;
    rand) label="1 set, random scores" ;;
    small) label="$keys sets x $per_key" ;;
  esac
  enc=$cenc; [ "$cenc" = "$renc" ] || enc="$cenc (redis: $renc)"
  printf '| zset | %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$n" "$enc" "$cu" "$ru" "$cr" "$rr"
done
