# Sourced by ab-cpu.sh and ab-bench.sh: start_pinned_servers BASE CPU
# LABEL:BINARY... starts one server per LABEL:BINARY (BINARY "redis" =
# redis-server), each pinned to CPU and on its own port above BASE, and
# waits until each answers PING. Fills the
# arrays pids, ports and labels; the caller's EXIT trap kills "${pids[@]}".
# fill_pinned_servers CPU then gives each the keys redis-benchmark's GET
# reads (-r 100000, 100-byte values), from CPU.
# shellcheck shell=bash
start_pinned_servers() {
  local base=$1 cpu=$2 spec label bin port
  shift 2
  for spec in "$@"; do
    IFS=: read -r label bin <<<"$spec"
    port=$((base + RANDOM % 1000 + ${#pids[@]}))
    if [[ $bin == redis ]]; then
      taskset -c "$cpu" redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
    else
      taskset -c "$cpu" "$bin" --port "$port" --shards 1 --cpus "$cpu" --save '' >/dev/null 2>&1 &
    fi
    pids+=($!)
    ports+=("$port")
    labels+=("$label")
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
}

fill_pinned_servers() {
  local port
  for port in "${ports[@]}"; do
    taskset -c "$1" redis-benchmark -p "$port" -q -t set -c 50 -d 100 -r 100000 -n 300000 -P 16 >/dev/null 2>&1
  done
}
