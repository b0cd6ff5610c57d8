#!/usr/bin/env bash
# Memory per idle connection, corekv vs redis-server, same client script:
# RSS of the server before and after N connections that each sent one PING
# and stay open, and after they close.
#   bench/idle-connections.sh [N] [corekv binary]
set -euo pipefail
N=${1:-10000}
COREKV=${2:-target/release/corekv}
ulimit -n $((N + 1024))
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# Opens N connections, PINGs on each, reports after they all answered,
# waits for a line on stdin, then closes them.
cat > "$DIR/hold.py" <<'PY'
import socket, sys
port, n, ping = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    if ping: s.sendall(b"PING\r\n")
    socks.append(s)
for s in socks:
    assert not ping or s.recv(16) == b"+PONG\r\n"
print("ready", flush=True)
sys.stdin.readline()
for s in socks:
    s.close()
PY

measure() { # name pid port
  local name=$1 pid=$2 port=$3
  sleep 1
  # Warm-up: 1000 connections opened and closed, so the baseline includes
  # what any first client makes resident (both servers alike).
  echo | python3 "$DIR/hold.py" "$port" 1000 1 >/dev/null
  sleep 1
  local before; before=$(rss_kb "$pid")
  coproc HOLD { python3 "$DIR/hold.py" "$port" "$N" "${PING:-1}"; }
  read -r _ <&"${HOLD[0]}"
  sleep 2
  local during; during=$(rss_kb "$pid")
  echo >&"${HOLD[1]}"
  wait "$HOLD_PID" || true
  sleep 3
  local after; after=$(rss_kb "$pid")
  echo "$name: RSS ${before} KiB idle, ${during} KiB with $N connections, ${after} KiB after they closed;" \
       "$(( (during - before) * 1024 / N )) bytes per connection"
  echo "$name $(( (during - before) * 1024 / N ))" >> "$DIR/per_conn"
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --maxclients $((N + 100)) --dir "$DIR" >/dev/null &
rpid=$!
measure redis-server "$rpid" "$port"
kill "$rpid"; wait "$rpid" || true

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$COREKV" --port "$port" --bind 127.0.0.1 --save "" --maxclients $((N + 100)) --dir "$DIR" --shards "${SHARDS:-2}" >/dev/null &
cpid=$!
measure corekv "$cpid" "$port"
kill "$cpid"; wait "$cpid" || true

awk '{v[$1]=$2} END {printf "corekv / redis-server per connection: %.2fx\n", v["corekv"]/v["redis-server"]}' "$DIR/per_conn"
