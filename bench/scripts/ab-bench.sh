#!/usr/bin/env bash
# Server CPU per request of several servers under the same corekv-bench
# workload, interleaved (ab-cpu.sh's method for the suites' load
# generator): every server starts once, pinned to one CPU, is preloaded
# once, and the rounds run each server's test in turn, so the VM's drift
# hits all of them alike. Prints the median of each server's CPU per
# request (corekv-bench --server-pid: utime+stime from /proc) and of its
# throughput.
#
#   bench/scripts/ab-bench.sh ROUNDS CONNECTIONS LABEL:BINARY ...   (BINARY "redis" = redis-server)
#
# Environment: SIZES (--data-size-list, "100:99,102400:1": the skewed
# suite's values), RATIO (SET:GET, 1:2), KEYS (100000), ROUND_SECONDS (3),
# SERVER_CPU (0), CLIENT_CPU (1).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=$1
conns=$2
shift 2
bench=target/release/corekv-bench
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
workload=(--key-minimum 0 --key-maximum $((${KEYS:-100000} - 1)) --data-size-list "${SIZES:-100:99,102400:1}" --seed 1)
out=$(mktemp)
pids=()
ports=()
labels=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "$out"' EXIT
# shellcheck source=bench/scripts/pinned-servers.sh
source bench/scripts/pinned-servers.sh
start_pinned_servers 31000 "$server_cpu" "$@"
for port in "${ports[@]}"; do
  taskset -c "$client_cpu" "$bench" -p "$port" -t 1 --preload --command PING -n 1 -c 16 "${workload[@]}" >/dev/null 2>&1
done
for _ in $(seq "$rounds"); do
  for i in "${!pids[@]}"; do
    report=$(taskset -c "$client_cpu" "$bench" -p "${ports[$i]}" -t 1 --warmup 1 --test-time "${ROUND_SECONDS:-3}" \
      --allow-errors "${workload[@]}" -c "$conns" --ratio "${RATIO:-1:2}" --server-pid "${pids[$i]}" 2>&1)
    cpu=$(sed -n 's/.*server CPU.*: \([0-9.]*\) µs per request.*/\1/p' <<<"$report")
    ops=$(awk '$1 == "Totals" {print $2}' <<<"$report")
    echo "${labels[$i]} $cpu $ops" >>"$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, cpu, ops = line.split()
    rows[label].append((float(cpu), float(ops)))
for label, r in rows.items():
    cpu = [c for c, _ in r]
    ops = [o for _, o in r]
    print(f"{label:10} rounds {len(r)}  server CPU µs/request: median {statistics.median(cpu):.2f} "
          f"({min(cpu):.2f}-{max(cpu):.2f})  ops/s: median {statistics.median(ops):.0f} ({min(ops):.0f}-{max(ops):.0f})")
PY
