#!/usr/bin/env bash
# Pub/Sub fan-out, corekv vs redis-server in the same run: 1 publisher and
# 1, 100, 1000 subscribers of one channel (spread over corekv's cores by
# the kernel), messages delivered per second with 32 PUBLISHes in flight,
# and PUBLISH latency p50/p99 with one in flight.
#   bench/pubsub.sh [seconds] [shards]     (release build: cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
SHARDS=${2:-2}
BENCH=target/release/pubsub-bench
COREKV=target/release/corekv
ulimit -n 8192
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$DIR"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; echo "no server on $1" >&2; exit 1; }

RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >/dev/null 2>&1 &
CPORT=$(free_port)
"$COREKV" --port "$CPORT" --bind 127.0.0.1 --shards "$SHARDS" --save "" --dir "$DIR" >/dev/null 2>&1 &
wait_port "$RPORT"; wait_port "$CPORT"

printf "%-12s %6s %8s %14s %10s %10s\n" server subs inflight delivered/s p50_us p99_us
for SUBS in 1 100 1000; do
  for INFLIGHT in 32 1; do
    for NAME in redis-server corekv; do
      PORT=$RPORT; [ "$NAME" = corekv ] && PORT=$CPORT
      OUT=$("$BENCH" "$PORT" "$SUBS" "$SECS" "$INFLIGHT")
      echo "$NAME $OUT" >> "$DIR/raw.txt"
      python3 - "$NAME" "$OUT" <<'PY'
import json, sys
r = json.loads(sys.argv[2])
print("%-12s %6d %8d %14.0f %10d %10d" % (sys.argv[1], r["subscribers"], r["inflight"], r["delivered_per_sec"], r["p50_us"], r["p99_us"]))
if r["delivered"] != r["receivers_counted"]:
    print("  (delivered %d of %d counted)" % (r["delivered"], r["receivers_counted"]))
PY
    done
  done
done
