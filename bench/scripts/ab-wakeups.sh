#!/usr/bin/env bash
# Wake-ups and CPU per request of several servers under the same
# redis-benchmark GET load, interleaved (ab-cpu.sh's method): voluntary
# context switches summed over all the server's threads (a shard sleeping
# in its ring is one) and utime+stime, per request, averaged over rounds.
#
#   bench/scripts/ab-wakeups.sh ROUNDS LABEL:BINARY ...   (BINARY "redis" = redis-server)
#
# Environment: C (connections, 50), N (requests per round, 200000),
# SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail
rounds=$1
shift
hz=$(getconf CLK_TCK)
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
pids=()
ports=()
labels=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# shellcheck source=bench/scripts/pinned-servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/pinned-servers.sh"
start_pinned_servers 25000 "$server_cpu" "$@"
fill_pinned_servers "$client_cpu"
switches() {
  cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}'
}
n=${N:-200000}
for _ in $(seq "$rounds"); do
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    c0=$(switches "$pid")
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    taskset -c "$client_cpu" redis-benchmark -p "${ports[$i]}" -q -t get -c "${C:-50}" -d 100 -r 100000 -n "$n" -P 1 >/dev/null 2>&1
    c1=$(switches "$pid")
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    echo "${labels[$i]} $((c1 - c0)) $((u1 + s1 - u0 - s0))"
  done
done | awk -v n="$n" -v hz="$hz" '{cs[$1] += $2; t[$1] += $3; k[$1]++}
  END {for (l in cs) printf "%-10s wake-ups/request %.3f  CPU µs/request %.2f\n", l, cs[l] / k[l] / n, t[l] / k[l] / hz * 1e6 / n}'
