#!/usr/bin/env bash
# Eviction under a cache workload: redis-server and corekv at the same
# maxmemory, SET:GET 1:4 over a Zipf key distribution (s 0.99) on a key
# space several times what fits. Per policy and server: throughput, GET hit
# ratio (keyspace_hits / (hits + misses)), evictions, keys held at the end
# (DBSIZE) and bytes per key ((used_memory - used_memory_startup) / keys),
# and used_memory against the limit, after a warm-up that fills the memory.
# Both servers get the same request sequence (a fixed number of requests
# per client, one seed): a run of fixed length would give the faster server
# more requests, so more distinct keys and fewer first-time misses.
# (GETs of evicted keys are misses the load generator would call mismatches:
# --allow-errors.)
#
#   bench/eviction.sh [maxmemory] [keys] [requests] [shards] [value bytes]
# requests: per client (20 clients) in the measured run; the warm-up runs twice as many.
# POLICIES="allkeys-random ..." picks the policies (default: allkeys-lru, -lfu, -random).
set -euo pipefail
cd "$(dirname "$0")/.."
maxmemory=${1:-64mb}
keys=${2:-2000000}
requests=${3:-300000}
shards=${4:-2}
size=${5:-100}
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
    -d "$size" -n "$2" --seed "$3" --quiet --allow-errors --json "$dir/run.json" >/dev/null
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
echo "maxmemory $maxmemory, $keys keys (Zipf s=0.99, $size-byte values), SET:GET 1:4, 20 x $requests requests after 20 x $((2 * requests)), corekv --shards $shards"
printf '%-15s %-13s %9s %8s %9s %9s %9s %10s\n' policy server ops/s hit% evicted keys B/key used/limit
for policy in ${POLICIES:-allkeys-lru allkeys-lfu allkeys-random}; do
  for server in "redis-server $base" "corekv $((base + 1))"; do
    read -r name port <<<"$server"
    redis-cli -p "$port" flushall >/dev/null
    redis-cli -p "$port" config set maxmemory-policy "$policy" >/dev/null
    load "$port" $((2 * requests)) 1 >/dev/null
    redis-cli -p "$port" config resetstat >/dev/null
    ops=$(load "$port" "$requests" 2)
    hits=$(info "$port" stats keyspace_hits)
    misses=$(info "$port" stats keyspace_misses)
    evicted=$(info "$port" stats evicted_keys)
    used=$(info "$port" memory used_memory)
    startup=$(info "$port" memory used_memory_startup)
    limit=$(info "$port" memory maxmemory)
    held=$(redis-cli -p "$port" dbsize)
    printf '%-15s %-13s %9s %7.2f%% %9s %9s %9.0f %10.3f\n' "$policy" "$name" "$ops" \
      "$(awk -v h="$hits" -v m="$misses" 'BEGIN {print 100 * h / (h + m)}')" "$evicted" "$held" \
      "$(awk -v u="$used" -v s="$startup" -v k="$held" 'BEGIN {print (u - s) / k}')" \
      "$(awk -v u="$used" -v l="$limit" 'BEGIN {print u / l}')"
  done
done
