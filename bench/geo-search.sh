#!/usr/bin/env bash
# GEOSEARCH latency: redis-server and corekv (one shard) pinned to the same
# CPU, the same points (a 1000 x 100 grid over ~1° x 1° around 13.5E 38N,
# Sicily), redis-benchmark on another CPU with one connection and no
# pipelining, so each figure is one request's round trip. Three searches:
# a small radius (285 points), a larger one (5 km, hundreds) sorted and cut
# by COUNT 10, a 4 x 4 km box (135 points) with coordinates.
# Each server runs its rounds in turn; the table shows its median round.
#
#   bench/geo-search.sh [requests] [rounds] [server-cpu] [client-cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-5000}
rounds=${2:-3}
server_cpu=${3:-0}
client_cpu=${4:-1}
corekv=${COREKV:-target/release/corekv}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
base=$((25000 + RANDOM % 1000))
dir=$(mktemp -d)
taskset -c "$server_cpu" redis-server --port "$base" --save '' --appendonly no >/dev/null 2>&1 &
redis=$!
taskset -c "$server_cpu" "$corekv" --port $((base + 1)) --shards 1 --save '' --dir "$dir" >/dev/null 2>&1 &
core=$!
trap 'kill $redis $core 2>/dev/null || true; rm -rf "$dir"' EXIT
for p in $base $((base + 1)); do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
python3 - "$dir/points.txt" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(1000):
        args = " ".join(f"{13.0 + (i * 7 % 1000) / 1000:.6f} {37.5 + j / 100:.6f} p{i}_{j}" for j in range(100))
        f.write(f"GEOADD pts {args}\n")
PY
for p in $base $((base + 1)); do
  redis-cli -p "$p" < "$dir/points.txt" >/dev/null
  echo "port $p: $(redis-cli -p "$p" zcard pts) points"
done
searches=(
  "GEOSEARCH pts FROMLONLAT 13.5 38 BYRADIUS 3 km"
  "GEOSEARCH pts FROMLONLAT 13.5 38 BYRADIUS 5 km ASC COUNT 10 WITHDIST"
  "GEOSEARCH pts FROMLONLAT 13.5 38 BYBOX 4 4 km WITHCOORD"
)
# p50 and p99 in ms of one redis-benchmark run.
run() {
  # shellcheck disable=SC2086
  taskset -c "$client_cpu" redis-benchmark -p "$1" -c 1 -n "$requests" --csv $2 | tail -1 |
    tr -d '"' | awk -F, '{print $2, $5, $7}'
}
printf '%-70s %-13s %10s %9s %9s\n' search server req/s p50_ms p99_ms
for s in "${searches[@]}"; do
  echo "$(redis-cli -p "$base" $s | wc -l) reply lines (redis) / $(redis-cli -p $((base + 1)) $s | wc -l) (corekv): $s" >&2
  for server in "redis-server $base" "corekv $((base + 1))"; do
    read -r name port <<<"$server"
    for _ in $(seq "$rounds"); do run "$port" "$s"; done | sort -n | awk -v n="$rounds" 'NR == int((n + 1) / 2)' |
      while read -r rps p50 p99; do printf '%-70s %-13s %10s %9s %9s\n' "$s" "$name" "$rps" "$p50" "$p99"; done
  done
done
