#!/usr/bin/env bash
# Regenerates proxy/src/commands/redis-7.0-commands.resp3: Redis's own
# COMMAND INFO and COMMAND DOCS replies (RESP3) for every command corekv
# implements, so COMMAND answers with Redis's exact metadata. Run it after
# adding a command; needs redis-server 7.0 (apt-get install redis-server).
set -euo pipefail
cd "$(dirname "$0")/.."
out=proxy/src/commands/redis-7.0-commands.resp3
names=$(cat shard/src/commands/*.rs | grep -o 'cmd!("[a-z_-]*"' | sed 's/cmd!("//; s/"//' | sort -u | tr '\n' ' ')
port=$((20000 + RANDOM % 10000))
redis-server --port "$port" --save '' --appendonly no --daemonize no >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
exec 3<>"/dev/tcp/127.0.0.1/$port"
# shellcheck disable=SC2086
printf 'HELLO 3\r\nCOMMAND INFO %s\r\nCOMMAND DOCS %s\r\n' "$names" "$names" >&3
timeout 2 cat <&3 >"$out.tmp" || true
# Drop the HELLO reply: it ends with its "modules" entry, an empty array.
python3 - "$out.tmp" "$out" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
end_of_hello = b'$7\r\nmodules\r\n*0\r\n'
start = data.index(end_of_hello) + len(end_of_hello)
open(sys.argv[2], 'wb').write(data[start:])
PY
rm -f "$out.tmp"
echo "wrote $out ($(wc -c <"$out") bytes) for: $names"
