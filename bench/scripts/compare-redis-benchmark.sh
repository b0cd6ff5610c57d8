#!/usr/bin/env bash
# Cross-checks corekv-bench against redis-benchmark on one redis-server:
# GET-only, 50 connections (CLIENTS=N to change), 1 client thread, 100k keys, 100-byte values,
# pipeline 1 and 16. redis-server runs on CPU 0, the load generators on CPU 1.
#
# For every run it prints what the tool reported, the rate the server itself
# saw (INFO total_commands_processed over the run's wall time) and the
# tool's own CPU use, so a client-bound generator is visible as ~100% CPU.
#
# With SERVER_CPU_PERCENT=N (root, cgroup v1 or v2 cpu controller) the server
# is capped at N% of its core, so that it, not either client, is the
# bottleneck; both tools should then report the same throughput.
#
# BENCH_ARGS adds options to every corekv-bench run (e.g. "--refill eager").
#
# usage: [SERVER_CPU_PERCENT=25] [CLIENTS=50] [BENCH_ARGS=...] bench/scripts/compare-redis-benchmark.sh [ROUNDS] [REQUESTS_P1] [REQUESTS_P16]
set -euo pipefail
rounds=${1:-3}
n_p1=${2:-1000000}
n_p16=${3:-10000000}
clients=${CLIENTS:-50}
bench=${CORE_KV_BENCH:-$(dirname "$0")/../../target/release/corekv-bench}
suite=$(dirname "$bench")/corekv-suite
if [ ! -x "$bench" ] || [ ! -x "$suite" ]; then
    echo "build first: cargo build --release -p corekv-bench (or set CORE_KV_BENCH)" >&2; exit 2
fi
for tool in redis-server redis-cli redis-benchmark taskset; do
    command -v "$tool" >/dev/null || { echo "$tool not found: run the project's setup script" >&2; exit 2; }
done

port=$("$suite" free-port)
dir=$(mktemp -d)
taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
server=$!
cgroup=
cleanup() {
    kill $server 2>/dev/null || true
    wait $server 2>/dev/null || true
    [ -n "$cgroup" ] && rmdir "$cgroup" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
if [ -n "${SERVER_CPU_PERCENT:-}" ]; then
    period=10000 quota=$((SERVER_CPU_PERCENT * 100))
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        cgroup=/sys/fs/cgroup/corekv-bench-server-$$
        mkdir "$cgroup" && echo "$quota $period" >"$cgroup/cpu.max"
    else
        cgroup=/sys/fs/cgroup/cpu/corekv-bench-server-$$
        mkdir "$cgroup" && echo $period >"$cgroup/cpu.cfs_period_us" && echo $quota >"$cgroup/cpu.cfs_quota_us"
    fi
    echo $server >"$cgroup/cgroup.procs"
    echo "# redis-server capped at ${SERVER_CPU_PERCENT}% of CPU 0"
fi
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

processed() { redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '/^total_commands_processed:/ {print $2}'; }
server_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)

# run LABEL CMD... : prints "LABEL reported server_seen client_cpu% server_cpu%"
run() {
    local label=$1; shift
    local c0 t0 t1 c1 s0 s1 out cpu
    c0=$(processed); s0=$(server_ticks); t0=$(date +%s.%N)
    # bash's own `time` (no /usr/bin/time needed): wall, user, system seconds.
    out=$( { TIMEFORMAT='CPU %R %U %S'; time taskset -c 1 "$@" 2>&1; } 2>&1 | tr '\r' '\n')
    t1=$(date +%s.%N); s1=$(server_ticks); c1=$(processed)
    local reported
    if [[ $label == redis-benchmark* ]]; then
        reported=$(grep -oE 'GET: [0-9.]+ requests per second' <<<"$out" | tail -1 | awk '{print $2}')
    else
        reported=$(awk '$1 == "Totals" {print $2}' <<<"$out")
    fi
    cpu=$(awk '$1 == "CPU" {printf "%.0f", ($3 + $4) / $2 * 100}' <<<"$out")
    awk -v l="$label" -v r="$reported" -v c="$cpu" -v c0="$c0" -v c1="$c1" -v s0="$s0" -v s1="$s1" \
        -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN {
            # the -2 discounts the two INFO calls bracketing the run
            printf "%-26s %12.0f %12.0f %9s%% %9.0f%%\n", l, r, (c1 - c0 - 2) / (t1 - t0), c, (s1 - s0) / hz / (t1 - t0) * 100
        }'
}

printf '%-26s %12s %12s %10s %10s\n' tool reported_ops/s server_ops/s client_cpu server_cpu
for p in 1 16; do
    n=$n_p1; [ "$p" = 16 ] && n=$n_p16
    echo "# -P $p, $n requests"
    for _ in $(seq "$rounds"); do
        run "redis-benchmark -P $p" redis-benchmark -p "$port" -t get -n "$n" -c "$clients" -P "$p" -r 100000 -d 100 -q
        # shellcheck disable=SC2086 # BENCH_ARGS is a list of extra options
        run "corekv-bench --pipeline $p" "$bench" -p "$port" -t 1 -c $clients --pipeline "$p" --ratio 0:1 \
            --key-minimum 0 --key-maximum 99999 -d 100 -n $((n / clients)) --seed 1 ${BENCH_ARGS:-}
    done
done
