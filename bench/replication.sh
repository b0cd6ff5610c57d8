#!/usr/bin/env bash
# Replication under a write load, the Ericsson study side by side (issue 13):
# a primary and a replica in two network namespaces joined by a veth pair
# rate-limited with tc tbf; the primary preloaded with a data set, a write
# load (SET, MSET or HSET) started on it, then REPLICAOF on the replica.
#
#   sudo bench/replication.sh              # MODE=sync: every data set x load x compression
#   sudo MODE=limit bench/replication.sh   # the largest write rate each buffer limit sustains
#
# Per run (MODE=sync): full-sync time (REPLICAOF to master_link_status:up),
# drain time (until the replica's offset is within DRAIN_BYTES of the
# primary's), peak replica output buffer (corekv: the buffer_peak_held
# bytes INFO replication reports per replica; redis: CLIENT LIST omem of the
# replica, polled; the JSON also has INFO memory mem_clients_slaves), the
# compression ratio of the stream sealed until the link came up (corekv's
# INFO replication repl_stream_compression_ratio),
# the primary's commands/s during the sync (INFO stats
# total_commands_processed) and CPU (utime+stime of the primary and its
# reaped children, /proc/PID/stat) from REPLICAOF to drained, and full-sync
# restarts (sync_full beyond 1). Columns "vs no" compare with the same data
# set and load without compression. MODE=limit raises the write rate until
# a sync restarts (client-output-buffer-limit replica LIMIT 0 0) and
# bisects: the largest rate per limit that syncs with no restart.
#
# Settings (environment):
#   PRIMARY=corekv|redis   the primary's kind (REPLICA: the replica's, redis)
#   COMPRESSIONS="no lz4 zstd"  corekv's replica-output-buffer-compression
#                          (redis primaries: n/a); LEVEL: its -level (0)
#   DATASETS="random repeat text"  LOADS="set mset hset"
#   LINK=100               Mbit/s of the veth link (the study: 75-600)
#   KEYS=50000 SIZE=700    preloaded keys and value bytes (the study's
#                          records were ~700 bytes)
#   RATE=4000              values written per second during the sync (MSET
#                          and HSET carry 10 per command), or "max": closed
#                          loop, for the throughput cost (the buffer then
#                          cannot drain; drain is "-")
#   BUFFER_LIMIT="0 0 0"   client-output-buffer-limit replica in MODE=sync
#   LIMITS="8mb 32mb"      MODE=limit: the limits to try; RATE is the
#                          first rate tried, doubled until a restart
#   TIMEOUT=120            seconds a sync may take before it counts as failed
#   MAX_BUFFER=2147483648  a run stops when the replica buffer passes it
#   DISKLESS=yes           repl-diskless-sync (yes: the RDB streamed with an
#                          EOF marker, 7.0's default; no: a file sent by size)
#   PRIMARY_CPU=0 OTHER_CPU=1  the primary alone on one CPU; replica, load
#                          and polling on the other
#   COREKV, BENCH          binaries (default: built in release here)
#   OUT=bench/results/replication-<primary>-<mode>.json
#   LOGS=DIR               keep each run's server and load logs there
#
# Needs root (ip netns, tc), iproute2, redis-server and redis-cli. Addresses
# 192.168.213.1/30 (primary) and .2 (replica) exist only inside the two
# namespaces this script creates and deletes on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces, tc)" >&2; exit 2; }
for tool in ip tc redis-server redis-cli taskset; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 2; }
done

PRIMARY=${PRIMARY:-corekv}
REPLICA=${REPLICA:-redis}
MODE=${MODE:-sync}
DATASETS=${DATASETS:-random repeat text}
LOADS=${LOADS:-set mset hset}
LINK=${LINK:-100}
KEYS=${KEYS:-50000}
SIZE=${SIZE:-700}
RATE=${RATE:-4000}
LEVEL=${LEVEL:-0}
BUFFER_LIMIT=${BUFFER_LIMIT:-0 0 0}
LIMITS=${LIMITS:-8mb 32mb}
TIMEOUT=${TIMEOUT:-120}
DISKLESS=${DISKLESS:-yes}
MAX_BUFFER=${MAX_BUFFER:-2147483648}
DRAIN_BYTES=${DRAIN_BYTES:-1048576}
PRIMARY_CPU=${PRIMARY_CPU:-0}
OTHER_CPU=${OTHER_CPU:-1}
if [ "$PRIMARY" = corekv ]; then COMPRESSIONS=${COMPRESSIONS:-no lz4 zstd}; else COMPRESSIONS=n/a; fi
OUT=${OUT:-bench/results/replication-$PRIMARY-$MODE.json}

target=${CARGO_TARGET_DIR:-target}
if [ -z "${BENCH:-}" ] || { [ -z "${COREKV:-}" ] && [ "$PRIMARY$REPLICA" != redisredis ]; }; then
  cargo build --release -j2 -q -p corekv -p corekv-bench
fi
BENCH=${BENCH:-$target/release/corekv-bench}
COREKV=${COREKV:-$target/release/corekv}
BENCH=$(realpath "$BENCH")
COREKV=$(realpath "$COREKV")

ns_p=kvp$$ ns_r=kvr$$ veth_p=kvp$$a veth_r=kvr$$b
addr_p=192.168.213.1 addr_r=192.168.213.2 port=6379
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$ns_p" 2>/dev/null || true
  ip netns del "$ns_r" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns_p"
ip netns add "$ns_r"
ip link add "$veth_p" type veth peer name "$veth_r"
ip link set "$veth_p" netns "$ns_p"
ip link set "$veth_r" netns "$ns_r"
ip -n "$ns_p" addr add "$addr_p/30" dev "$veth_p"
ip -n "$ns_r" addr add "$addr_r/30" dev "$veth_r"
for ns in "$ns_p" "$ns_r"; do ip -n "$ns" link set lo up; done
ip -n "$ns_p" link set "$veth_p" up
ip -n "$ns_r" link set "$veth_r" up
# Both directions: the stream one way, acknowledgements the other.
burst=$((LINK * 1000 / 8 / 100 > 64 ? LINK * 1000 / 8 / 100 : 64))
tc -n "$ns_p" qdisc add dev "$veth_p" root tbf rate "${LINK}mbit" burst "${burst}kb" latency 50ms
tc -n "$ns_r" qdisc add dev "$veth_r" root tbf rate "${LINK}mbit" burst "${burst}kb" latency 50ms

pcli() { ip netns exec "$ns_p" redis-cli -p "$port" "$@" 2>/dev/null | tr -d '\r'; }
rcli() { ip netns exec "$ns_r" redis-cli -p "$port" "$@" 2>/dev/null | tr -d '\r'; }
field() { awk -F: -v f="$2" '$1 == f { print $2; exit }' <<<"$1"; }
now_ms() { date +%s%3N; }
clk_tck=$(getconf CLK_TCK)
# utime + stime + cutime + cstime of PID, in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 + $14 + $15 }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b > 0) printf f, a / b; else printf "-" }'; }
# vs A B: A / B, or "-" when either is unknown.
vs() { if [ "$1" = - ] || [ "$2" = - ] || [ -z "$2" ]; then echo -; else div "$1" "$2"; fi; }
log() { echo "[$(date +%T)] $*" >&2; }

# start KIND NS ADDR DIR CPU [config...]: a server; sets $pid.
start() {
  local kind=$1 ns=$2 addr=$3 dir=$4 cpu=$5
  shift 5
  mkdir -p "$dir"
  if [ "$kind" = redis ]; then
    ip netns exec "$ns" taskset -c "$cpu" redis-server --port "$port" --bind "$addr 127.0.0.1" \
      --protected-mode no --save '' --appendonly no --dir "$dir" --repl-diskless-sync "$DISKLESS" --repl-diskless-sync-delay 0 "$@" \
      >"$dir/log" 2>&1 &
  else
    ip netns exec "$ns" taskset -c "$cpu" "$COREKV" --port "$port" --bind "$addr" 127.0.0.1 --protected-mode no \
      --shards 1 --cpus "$cpu" --save '' --appendonly no --dir "$dir" --repl-diskless-sync "$DISKLESS" --repl-diskless-sync-delay 0 "$@" \
      >"$dir/log" 2>&1 &
  fi
  pid=$!
  pids+=("$pid")
  local _
  for _ in $(seq 200); do
    ip netns exec "$ns" redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && return
    sleep 0.05
  done
  echo "$kind did not start; its log:" >&2
  cat "$dir/log" >&2
  exit 1
}

# stop PID: one of ours, forgotten once it is gone (no stale kill on exit).
stop() {
  local p kept=()
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  pids=("${kept[@]}")
}

# The write load's command template and values per command.
load_command() {
  case $1 in
    set) echo "SET __key__ __data__" ;;
    mset) echo "MSET$(for c in a b c d e f g h i j; do printf ' %s__key__ __data__' $c; done)" ;;
    hset) echo "HSET h__key__$(for f in 0 1 2 3 4 5 6 7 8 9; do printf ' f%s __data__' $f; done)" ;;
    *) echo "unknown load $1" >&2; exit 2 ;;
  esac
}
per_command() { [ "$1" = set ] && echo 1 || echo 10; }

# sum_slave_field INFO NAME: the sum over slaveN lines of field NAME
# (corekv's per-replica buffer_held, buffer_raw, buffer_peak_held...).
sum_slave_field() {
  awk -v name="$2" -F'[:,]' '$1 ~ /^slave[0-9]+$/ {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) s += kv[2] } }
    END { printf "%.0f\n", s }' <<<"$1"
}

# run DATASET LOAD COMPRESSION RATE LIMIT: one full sync under load; sets
# the r_* results and returns 0 if it synced and drained with no restart.
run() {
  local data=$1 load=$2 comp=$3 rate=$4 limit=$5
  local dir=$work/run ppid rpid t0 t_up="" t_drain="" cpu0 cpu1 cmds0 cmds_up=0 t_end cmds_last=0 t_last=0 t_up_or_last
  local pinfo rinfo clients omem slaves held raw p_off r_off full=0 link="" per loadpid
  rm -rf "$dir"
  start "$PRIMARY" "$ns_p" "$addr_p" "$dir/primary" "$PRIMARY_CPU" \
    --client-output-buffer-limit "replica $limit"
  ppid=$pid
  if [ "$PRIMARY" = corekv ] && [ "$comp" != n/a ]; then
    pcli config set replica-output-buffer-compression "$comp" >/dev/null
    pcli config set replica-output-buffer-compression-level "$LEVEL" >/dev/null
  fi
  start "$REPLICA" "$ns_r" "$addr_r" "$dir/replica" "$OTHER_CPU"
  rpid=$pid
  ip netns exec "$ns_p" taskset -c "$OTHER_CPU" "$BENCH" -p "$port" --data "$data" -d "$SIZE" --preload \
    --key-maximum $((KEYS - 1)) --ratio 0:1 -n 1 -t 1 -c 8 --pipeline 16 --quiet --seed 1 >/dev/null
  per=$(per_command "$load")
  local pacing=(--rate "$(div "$rate" "$per" %.0f)" -c 4)
  [ "$rate" = max ] && pacing=(-c 8 --pipeline 4)
  ip netns exec "$ns_p" taskset -c "$OTHER_CPU" "$BENCH" -p "$port" --data "$data" -d "$SIZE" \
    --command "$(load_command "$load")" "${pacing[@]}" -t 1 --key-maximum $((KEYS - 1)) \
    --test-time $((TIMEOUT + 60)) --quiet --allow-errors --seed 2 >"$dir/load.log" 2>&1 &
  loadpid=$!
  pids+=("$loadpid")
  sleep 1
  r_peak_omem=0 r_peak_clients=0 r_peak_held=0 r_peak_raw=0 r_ratio=-
  cpu0=$(cpu_ticks "$ppid")
  cmds0=$(field "$(pcli info stats)" total_commands_processed)
  t0=$(now_ms)
  rcli replicaof "$addr_p" "$port" >/dev/null
  while :; do
    pinfo=$(pcli info)
    rinfo=$(rcli info replication)
    clients=$(pcli client list type replica)
    omem=$(grep -o 'omem=[0-9]*' <<<"$clients" | awk -F= '{ s += $2 } END { printf "%.0f\n", s }')
    slaves=$(field "$pinfo" mem_clients_slaves)
    # The primary's own peaks where it keeps them (corekv), else polled.
    held=$(sum_slave_field "$pinfo" buffer_peak_held)
    raw=$(sum_slave_field "$pinfo" buffer_peak_raw)
    if ((held == 0)); then
      held=$(sum_slave_field "$pinfo" buffer_held)
      raw=$(sum_slave_field "$pinfo" buffer_raw)
    fi
    full=$(field "$pinfo" sync_full)
    full=${full:-0}
    ((omem > r_peak_omem)) && r_peak_omem=$omem
    ((${slaves:-0} > r_peak_clients)) && r_peak_clients=${slaves:-0}
    if ((held > r_peak_held)); then r_peak_held=$held r_peak_raw=$raw; fi
    cmds_last=$(field "$pinfo" total_commands_processed) t_last=$(now_ms)
    link=$(field "$rinfo" master_link_status)
    if [ -z "$t_up" ] && [ "$link" = up ]; then
      t_up=$(now_ms)
      cmds_up=$(field "$pinfo" total_commands_processed)
      r_ratio=$(field "$pinfo" repl_stream_compression_ratio)
      r_ratio=${r_ratio:--}
      [ "$rate" = max ] && break
    fi
    if [ -n "$t_up" ]; then
      p_off=$(field "$pinfo" master_repl_offset)
      r_off=$(field "$rinfo" master_repl_offset)
      if (( ${p_off:-0} - ${r_off:-0} < DRAIN_BYTES )); then t_drain=$(now_ms); break; fi
    fi
    ((full > 1)) && break
    ((r_peak_held > MAX_BUFFER || r_peak_omem > MAX_BUFFER)) && break
    (( $(now_ms) - t0 > TIMEOUT * 1000 )) && break
    sleep 0.25
  done
  t_end=$(now_ms)
  cpu1=$(cpu_ticks "$ppid")
  r_restarts=$((full > 1 ? full - 1 : 0))
  if ((r_restarts > 0)); then r_outcome=restart
  elif ((r_peak_held > MAX_BUFFER || r_peak_omem > MAX_BUFFER)); then r_outcome="buffer over $(mb "$MAX_BUFFER") MB"
  elif [ -z "$t_up" ]; then r_outcome="no sync in ${TIMEOUT}s"
  elif [ -z "$t_drain" ] && [ "$rate" != max ]; then r_outcome="not drained in ${TIMEOUT}s"
  else r_outcome=ok; fi
  r_sync_s=$([ -n "$t_up" ] && div $((t_up - t0)) 1000 || echo -)
  r_drain_s=$([ -n "$t_drain" ] && div $((t_drain - t0)) 1000 || echo -)
  # Commands/s until the link came up (or the run stopped without it).
  [ -n "$t_up" ] || { cmds_up=$cmds_last t_up_or_last=$t_last; }
  r_ops=$(div $(((cmds_up - cmds0) * 1000)) $((${t_up:-$t_up_or_last} - t0)) %.0f)
  r_cpu_pct=$(div $(((cpu1 - cpu0) * 100000 / clk_tck)) $((t_end - t0)) %.1f)
  r_peak=$r_peak_held
  [ "$PRIMARY" = redis ] && r_peak=$r_peak_omem
  stop "$loadpid"
  stop "$ppid"
  stop "$rpid"
  if [ -n "${LOGS:-}" ]; then
    mkdir -p "$LOGS"
    for f in primary/log replica/log load.log; do
      cp "$dir/$f" "$LOGS/$data-$load-${comp/\//}-$rate-${limit// /_}-${f//\//-}" 2>/dev/null || true
    done
  fi
  [ "$r_outcome" = ok ]
}

json_runs=()
meta="\"diskless\":\"$DISKLESS\",\"primary\":\"$PRIMARY\",\"replica\":\"$REPLICA\",\"link_mbit\":$LINK,\"keys\":$KEYS,\"size\":$SIZE,\"level\":$LEVEL"

if [ "$MODE" = sync ]; then
  echo "Full sync under load: $PRIMARY primary, $REPLICA replica, ${LINK} Mbit/s link, $KEYS keys of $SIZE bytes"
  echo "preloaded, $RATE values/s written during the sync, client-output-buffer-limit replica $BUFFER_LIMIT,"
  echo "repl-diskless-sync $DISKLESS."
  echo
  echo "| data | load | compression | full sync s | drained s | peak buffer MB | vs no | stream ratio | primary cmds/s | vs no | primary CPU % | vs no | restarts |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for data in $DATASETS; do
    for load in $LOADS; do
      base_ops="" base_cpu="" base_peak=""
      for comp in $COMPRESSIONS; do
        log "sync: $data $load $comp"
        run "$data" "$load" "$comp" "$RATE" "$BUFFER_LIMIT" || log "  $r_outcome"
        if [ "$comp" = no ] || [ "$comp" = n/a ]; then base_ops=$r_ops base_cpu=$r_cpu_pct base_peak=$r_peak; fi
        vs_ops=- vs_cpu=- vs_peak=-
        if [ "$comp" != no ] && [ "$comp" != n/a ]; then
          vs_ops=$(vs "$r_ops" "$base_ops")
          vs_peak=$(vs "$r_peak" "$base_peak")
          vs_cpu=$(vs "$r_cpu_pct" "$base_cpu")
        fi
        echo "| $data | $load | $comp | $r_sync_s | $r_drain_s | $(mb "$r_peak") | $vs_peak | $r_ratio | $r_ops | $vs_ops | $r_cpu_pct | $vs_cpu | $r_restarts |"
        json_runs+=("{\"data\":\"$data\",\"load\":\"$load\",\"compression\":\"$comp\",\"rate\":\"$RATE\",\"full_sync_s\":\"$r_sync_s\",\"drained_s\":\"$r_drain_s\",\"peak_omem\":$r_peak_omem,\"peak_mem_clients_slaves\":$r_peak_clients,\"peak_held\":$r_peak_held,\"peak_raw\":$r_peak_raw,\"peak_buffer\":$r_peak,\"stream_ratio\":\"$r_ratio\",\"primary_cmds_per_s\":\"$r_ops\",\"primary_cpu_pct\":\"$r_cpu_pct\",\"restarts\":$r_restarts,\"outcome\":\"$r_outcome\"}")
      done
    done
  done
elif [ "$MODE" = limit ]; then
  echo "Largest write rate (values/s of $SIZE bytes) a replica buffer limit sustains through a full sync with no"
  echo "restart: $PRIMARY primary, $REPLICA replica, ${LINK} Mbit/s link, $KEYS keys preloaded."
  echo
  echo "| data | load | compression | client-output-buffer-limit replica | largest rate ok | first rate failing | why |"
  echo "|---|---|---|---|---|---|---|"
  for data in $DATASETS; do
    for load in $LOADS; do
      for comp in $COMPRESSIONS; do
        for limit in $LIMITS; do
          ok=0 bad="" why="" rate=$RATE
          # Doubling until a restart, then three bisection steps.
          while [ -z "$bad" ] && ((rate <= 1000000)); do
            log "limit $limit: $data $load $comp at $rate values/s"
            if run "$data" "$load" "$comp" "$rate" "$limit 0 0"; then ok=$rate rate=$((rate * 2)); else bad=$rate why=$r_outcome; fi
          done
          for _ in 1 2 3; do
            [ -n "$bad" ] || break
            rate=$(((ok + bad) / 2))
            ((rate > ok && rate < bad)) || break
            log "limit $limit: $data $load $comp at $rate values/s"
            if run "$data" "$load" "$comp" "$rate" "$limit 0 0"; then ok=$rate; else bad=$rate why=$r_outcome; fi
          done
          echo "| $data | $load | $comp | $limit | $ok | ${bad:--} | ${why:--} |"
          json_runs+=("{\"data\":\"$data\",\"load\":\"$load\",\"compression\":\"$comp\",\"limit\":\"$limit\",\"largest_rate_ok\":$ok,\"first_rate_failing\":\"${bad:--}\",\"why\":\"${why:--}\"}")
        done
      done
    done
  done
else
  echo "MODE must be sync or limit" >&2
  exit 2
fi

mkdir -p "$(dirname "$OUT")"
{
  printf '{"mode":"%s",%s,"rate":"%s","runs":[' "$MODE" "$meta" "$RATE"
  (IFS=,; printf '%s' "${json_runs[*]}")
  printf ']}\n'
} >"$OUT"
log "wrote $OUT"
