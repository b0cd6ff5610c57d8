#!/usr/bin/env bash
# Streams, corekv vs redis-server side by side (issue 16): XADD and
# XREADGROUP throughput with redis-benchmark, and memory per stream entry.
#
#   bench/streams.sh [shards] [requests] [entries]
#
# shards: corekv --shards (default 1). requests: redis-benchmark -n for each
# throughput run (default 200000; 50 clients, pipeline 16). entries: stream
# entries loaded for the memory figure (default 1000000, "XADD s * field
# <i> value <i>" through redis-cli --pipe, one stream). XADD runs over 1000
# keys (spread over the shards); XREADGROUP reads one new entry per call
# (COUNT 1, ">") from one pre-filled stream, so it is a write on one shard.
# Prints markdown rows. Only bash, awk, redis-cli and redis-benchmark.
set -euo pipefail
shards=${1:-1}
requests=${2:-200000}
entries=${3:-1000000}
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
cargo build --release -q -p corekv

used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }
rss() { awk '$1 == "VmRSS:" {print $2 * 1024}' "/proc/$1/status"; }
wait_up() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; }
rps() { redis-benchmark -p "$1" -n "$requests" -c 50 -P 16 -r 1000 -q "${@:2}" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1; }
pids=()
tmp=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT

port_r=$((23000 + RANDOM % 1000))
port_c=$((port_r + 1000))
redis-server --port "$port_r" --save '' --appendonly no --dir "$tmp" >/dev/null 2>&1 &
pid_r=$!
target/release/corekv --port "$port_c" --shards "$shards" --save '' --dir "$tmp" >/dev/null 2>&1 &
pid_c=$!
pids=("$pid_r" "$pid_c")
wait_up "$port_r"
wait_up "$port_c"

echo "| benchmark | redis-server | corekv --shards $shards | corekv/redis |"
echo "|---|---|---|---|"
row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$(awk -v c="$3" -v r="$2" 'BEGIN { printf "%.2f", c / r }')"; }

# XADD over 1000 keys.
r=$(rps "$port_r" XADD 'bench:__rand_int__' '*' field value)
c=$(rps "$port_c" XADD 'bench:__rand_int__' '*' field value)
row "XADD (rps, 1000 keys, -c 50 -P 16)" "$r" "$c"

# XREADGROUP: one stream holding more entries than the run reads.
fill() {
  awk -v n="$requests" 'BEGIN { ORS = ""; for (i = 0; i < n + 1000; i++) print "*5\r\n$4\r\nXADD\r\n$2\r\nrg\r\n$1\r\n*\r\n$1\r\nf\r\n$" length(i) "\r\n" i "\r\n" }'
}
for port in "$port_r" "$port_c"; do
  fill | redis-cli -p "$port" --pipe >/dev/null
  redis-cli -p "$port" XGROUP CREATE rg g 0 >/dev/null
done
r=$(rps "$port_r" XREADGROUP GROUP g c COUNT 1 STREAMS rg '>')
c=$(rps "$port_c" XREADGROUP GROUP g c COUNT 1 STREAMS rg '>')
row "XREADGROUP COUNT 1 > (rps, one stream, -c 50 -P 16)" "$r" "$c"
kill "$pid_r" "$pid_c"
wait "$pid_r" "$pid_c" 2>/dev/null || true

# Memory per entry: fresh servers, one stream of `entries` entries.
redis-server --port "$port_r" --save '' --appendonly no --dir "$tmp" >/dev/null 2>&1 &
pid_r=$!
target/release/corekv --port "$port_c" --shards 1 --save '' --dir "$tmp" >/dev/null 2>&1 &
pid_c=$!
pids=("$pid_r" "$pid_c")
wait_up "$port_r"
wait_up "$port_c"
load() {
  awk -v n="$entries" 'BEGIN { ORS = ""; for (i = 0; i < n; i++) { v = "value:" i; print "*7\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$5\r\nfield\r\n$" length(i) "\r\n" i "\r\n$5\r\nvalue\r\n$" length(v) "\r\n" v "\r\n" } }'
}
base_ur=$(used "$port_r") base_uc=$(used "$port_c") base_rr=$(rss "$pid_r") base_rc=$(rss "$pid_c")
load | redis-cli -p "$port_r" --pipe >/dev/null
load | redis-cli -p "$port_c" --pipe >/dev/null
per() { awk -v now="$1" -v base="$2" -v n="$entries" 'BEGIN { printf "%.1f", (now - base) / n }'; }
row "used_memory B/entry ($entries entries, 2 fields)" "$(per "$(used "$port_r")" "$base_ur")" "$(per "$(used "$port_c")" "$base_uc")"
row "RSS B/entry" "$(per "$(rss "$pid_r")" "$base_rr")" "$(per "$(rss "$pid_c")" "$base_rc")"
