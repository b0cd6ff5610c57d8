#!/usr/bin/env bash
# Eviction under a cache workload: redis-server and corekv at the same
# maxmemory, SET:GET 1:4 over a Zipf key distribution (s 0.99) on a key
# space several times what fits. Per policy and server: throughput, GET hit
# ratio (keyspace_hits / (hits + misses)), evictions per second, and
# used_memory against the limit, after a warm-up that fills the memory.
# (GETs of evicted keys are misses the load generator would call mismatches:
# --allow-errors.)
#
#   bench/eviction.sh [maxmemory] [keys] [seconds] [shards]
set -euo pipefail
cd "$(dirname "$0")/.."
maxmemory=${1:-64mb}
keys=${2:-2000000}
seconds=${3:-15}
shards=${4:-2}
corekv=${COREKV:-target/release/corekv}
bench=${BENCH:-target/release/corekv-bench}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
[[ -n ${BENCH:-} ]] || cargo build --release -q -p corekv-bench --bin corekv-bench
base=$((24000 + RANDOM % 1000))
dir=$(mktemp -d)
redis-server --port "$base" --save '' --appendonly no --maxmemory "$maxmemory" >/dev/null 2>&1 &
redis=$!
"$corekv" --port $((base + 1)) --shards "$shards" --save '' --dir "$dir" --maxmemory "$maxmemory" >/dev/null 2>&1 &
core=$!
trap 'kill $redis $core 2>/dev/null || true; rm -rf "$dir"' EXIT
for p in $base $((base + 1)); do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
info() { redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'; }
load() {
  "$bench" -p "$1" -t 2 -c 10 --pipeline 8 --ratio 1:4 --key-pattern Z --key-minimum 1 --key-maximum "$keys" \
    -d 100 --test-time "$2" --quiet --allow-errors --json "$dir/run.json" >/dev/null
  python3 -c "import json,sys
def find(o):
    if isinstance(o, dict):
        if 'ops_per_sec' in o: return o['ops_per_sec']
        o = list(o.values())
    if isinstance(o, list):
        for v in o:
            r = find(v)
            if r is not None: return r
print('%.0f' % find(json.load(open(sys.argv[1]))))" "$dir/run.json"
}
echo "maxmemory $maxmemory, $keys keys (Zipf s=0.99, 100-byte values), SET:GET 1:4, ${seconds}s after a ${seconds}s warm-up, corekv --shards $shards"
printf '%-15s %-13s %10s %9s %12s %14s\n' policy server ops/s hit% evictions/s used/limit
for policy in allkeys-lru allkeys-lfu allkeys-random; do
  for server in "redis-server $base" "corekv $((base + 1))"; do
    read -r name port <<<"$server"
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config set maxmemory-policy "$policy" >/dev/null
    load "$port" "$seconds" >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
    ops=$(load "$port" "$seconds")
    hits=$(info "$port" stats keyspace_hits)
    misses=$(info "$port" stats keyspace_misses)
    evicted=$(info "$port" stats evicted_keys)
    used=$(info "$port" memory used_memory)
    limit=$(info "$port" memory maxmemory)
    printf '%-15s %-13s %10s %8.2f%% %12.0f %14.3f\n' "$policy" "$name" "$ops" \
      "$(awk -v h="$hits" -v m="$misses" 'BEGIN {print 100 * h / (h + m)}')" \
      "$(awk -v e="$evicted" -v s="$seconds" 'BEGIN {print e / s}')" \
      "$(awk -v u="$used" -v l="$limit" 'BEGIN {print u / l}')"
  done
done
