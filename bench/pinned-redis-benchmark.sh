#!/usr/bin/env bash
# corekv --shards 1 vs redis-server, both pinned to the same CPU, driven by
# redis-benchmark pinned to another CPU. Prints a markdown table of ops/s,
# the corekv/Redis ratio and server CPU time per operation (from
# /proc/<pid>/stat), the median of several alternating rounds.
#
#   bench/pinned-redis-benchmark.sh [server-cpu] [client-cpu] [rounds] [tests] [pipelines]
#
# tests: redis-benchmark test names (default "get set"), pipelines: depths
# (default "1 16"), e.g.
#   bench/pinned-redis-benchmark.sh 0 1 3 "lpush lpop sadd hset zadd lrange_100" 16
# RING=1 compares both client paths in the same rounds: corekv --client-ring
# no (glommio's reactor) and --client-ring yes (the default).
# COREKV=path picks the corekv binary (default target/release/corekv, built).
# TLS=1 runs both servers with a tls-port (certificates made with openssl in
# a temp dir; clients present theirs, tls-auth-clients yes) and drives the
# TLS ports with redis-benchmark --tls.
set -euo pipefail
cd "$(dirname "$0")/.."
server_cpu=${1:-0}
client_cpu=${2:-1}
rounds=${3:-5}
tests=${4:-get set}
pipelines=${5:-1 16}
command -v redis-benchmark >/dev/null || scripts/setup-test-deps.sh
corekv=${COREKV:-target/release/corekv}
[[ -n ${COREKV:-} ]] || cargo build --release -q -p corekv
port_redis=$((21000 + RANDOM % 1000))
port_corekv=$((port_redis + 1000))
port_ring=$((port_redis + 2000))
tls_server=()
tls_client=()
tls_offset=0
if [[ ${TLS:-0} == 1 ]]; then
  certs=$(mktemp -d)
  (
    cd "$certs"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=bench CA" 2>/dev/null
    echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >san.ext
    for n in server client; do
      openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj "/CN=$n" 2>/dev/null
      openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $n.crt -days 2 -extfile san.ext 2>/dev/null
    done
  )
  tls_offset=500
  tls_server=(--tls-cert-file "$certs/server.crt" --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.crt")
  tls_client=(--tls --cacert "$certs/ca.crt" --cert "$certs/client.crt" --key "$certs/client.key")
fi
tls_port() { [[ $tls_offset == 0 ]] || echo --tls-port $(($1 + tls_offset)); }
# shellcheck disable=SC2046
taskset -c "$server_cpu" redis-server --port "$port_redis" --save '' --appendonly no $(tls_port "$port_redis") "${tls_server[@]}" >/dev/null 2>&1 &
redis_pid=$!
reactor=()
[[ ${RING:-0} == 1 ]] && reactor=(--client-ring no)
# shellcheck disable=SC2046
taskset -c "$server_cpu" "$corekv" --port "$port_corekv" --shards 1 --cpus "$server_cpu" --save '' "${reactor[@]}" \
  $(tls_port "$port_corekv") "${tls_server[@]}" >/dev/null 2>&1 &
corekv_pid=$!
ring_pid=
ports="$port_redis $port_corekv"
if [[ ${RING:-0} == 1 ]]; then
  # shellcheck disable=SC2046
  taskset -c "$server_cpu" "$corekv" --port "$port_ring" --shards 1 --cpus "$server_cpu" --save '' --client-ring yes \
    $(tls_port "$port_ring") "${tls_server[@]}" >/dev/null 2>&1 &
  ring_pid=$!
  ports="$ports $port_ring"
fi
trap 'kill $redis_pid $corekv_pid $ring_pid 2>/dev/null || true; [[ -z ${certs:-} ]] || rm -rf "$certs"' EXIT
for p in $ports; do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# run PID PORT TEST PIPELINE N -> "ops_per_sec cpu_us_per_op"
run() {
  local pid=$1 port=$2 test=$3 pipeline=$4 n=$5 t0 t1 out
  t0=$(ticks "$pid")
  out=$(taskset -c "$client_cpu" redis-benchmark -p $((port + tls_offset)) "${tls_client[@]}" -q -t "$test" -c 50 -d 100 -r 100000 -n "$n" -P "$pipeline" 2>/dev/null |
    tr '\r' '\n' | grep 'requests per second' | tail -1 | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
  t1=$(ticks "$pid")
  echo "$out $(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v n="$n" 'BEGIN {print (b - a) * 1000000 / hz / n}')"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

if [[ -n $ring_pid ]]; then
  echo "| test | pipeline | redis-server ops/s | corekv reactor ops/s | ratio | corekv client-ring ops/s | ratio | redis µs CPU/op | reactor µs CPU/op | CPU ratio | client-ring µs CPU/op | CPU ratio |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| test | pipeline | redis-server ops/s | corekv ops/s | ratio | redis µs CPU/op | corekv µs CPU/op |"
  echo "|---|---|---|---|---|---|---|"
fi
for pipeline in $pipelines; do
  n=$((pipeline == 1 ? 200000 : 2000000))
  for test in $tests; do
    # LRANGE tests move 100+ elements per request: fewer requests.
    [[ $test == lrange* ]] && n=$((n / 10))
    : >/tmp/pinned.$$.r
    : >/tmp/pinned.$$.c
    : >/tmp/pinned.$$.g
    for _ in $(seq "$rounds"); do
      run "$redis_pid" "$port_redis" "$test" "$pipeline" "$n" >>/tmp/pinned.$$.r
      run "$corekv_pid" "$port_corekv" "$test" "$pipeline" "$n" >>/tmp/pinned.$$.c
      [[ -z $ring_pid ]] || run "$ring_pid" "$port_ring" "$test" "$pipeline" "$n" >>/tmp/pinned.$$.g
    done
    r_ops=$(cut -d' ' -f1 /tmp/pinned.$$.r | median)
    c_ops=$(cut -d' ' -f1 /tmp/pinned.$$.c | median)
    r_cpu=$(cut -d' ' -f2 /tmp/pinned.$$.r | median)
    c_cpu=$(cut -d' ' -f2 /tmp/pinned.$$.c | median)
    if [[ -n $ring_pid ]]; then
      g_ops=$(cut -d' ' -f1 /tmp/pinned.$$.g | median)
      g_cpu=$(cut -d' ' -f2 /tmp/pinned.$$.g | median)
      printf '| %s | %s | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n' "${test^^}" "$pipeline" \
        "$r_ops" "$c_ops" "$(awk -v c="$c_ops" -v r="$r_ops" 'BEGIN {print c / r}')" \
        "$g_ops" "$(awk -v c="$g_ops" -v r="$r_ops" 'BEGIN {print c / r}')" \
        "$r_cpu" "$c_cpu" "$(awk -v c="$c_cpu" -v r="$r_cpu" 'BEGIN {print c / r}')" \
        "$g_cpu" "$(awk -v c="$g_cpu" -v r="$r_cpu" 'BEGIN {print c / r}')"
    else
      printf '| %s | %s | %.0f | %.0f | %.2f | %.2f | %.2f |\n' "${test^^}" "$pipeline" "$r_ops" "$c_ops" \
        "$(awk -v c="$c_ops" -v r="$r_ops" 'BEGIN {print c / r}')" "$r_cpu" "$c_cpu"
    fi
  done
done
rm -f /tmp/pinned.$$.r /tmp/pinned.$$.c /tmp/pinned.$$.g
