#!/usr/bin/env bash
# Server CPU per request of several servers under the same redis-benchmark
# load, interleaved: every server starts once, pinned to one CPU (idle ones
# cost nothing there), is filled once (SET, -P 16), and then the rounds run
# each server's test in turn, so the VM's drift hits all of them alike.
# Prints the medians of user, system and total µs per request (/proc).
#
#   bench/scripts/ab-cpu.sh ROUNDS LABEL:BINARY ...   (BINARY "redis" = redis-server)
#
# Environment: TEST (get), P (pipeline, 1), C (connections, 50), N
# (requests per round, 200000), SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail
rounds=$1
shift
hz=$(getconf CLK_TCK)
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
out=$(mktemp)
pids=()
ports=()
labels=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "$out"' EXIT
# shellcheck source=bench/scripts/pinned-servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/pinned-servers.sh"
start_pinned_servers 28000 "$server_cpu" "$@"
fill_pinned_servers "$client_cpu"
n=${N:-200000}
for _ in $(seq "$rounds"); do
  for i in "${!pids[@]}"; do
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/${pids[$i]}/stat")
    taskset -c "$client_cpu" redis-benchmark -p "${ports[$i]}" -q -t "${TEST:-get}" -c "${C:-50}" -d 100 -r 100000 \
      -n "$n" -P "${P:-1}" >/dev/null 2>&1
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/${pids[$i]}/stat")
    awk -v l="${labels[$i]}" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$n" \
      'BEGIN {printf "%s %.3f %.3f %.3f\n", l, u / hz * 1e6 / n, s / hz * 1e6 / n, (u + s) / hz * 1e6 / n}'
  done
done >"$out"
python3 - "$out" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, user, system, total = line.split()
    rows[label].append((float(user), float(system), float(total)))
for label, r in rows.items():
    med = [statistics.median(x[i] for x in r) for i in range(3)]
    print(f"{label:10} rounds {len(r)}  µs/request: user {med[0]:.2f}  system {med[1]:.2f}  "
          f"total {med[2]:.2f} ({min(x[2] for x in r):.2f}-{max(x[2] for x in r):.2f})")
PY
