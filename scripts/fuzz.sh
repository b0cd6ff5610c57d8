#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with the flags cargo-fuzz passes and
# runs each for a bounded time (seconds, default 60) from a seed corpus.
# Needs a nightly toolchain (rustup toolchain install nightly).
# Usage: scripts/fuzz.sh [seconds] [target...]
# shellcheck disable=SC2016 # the seeds' $ signs are RESP's, not the shell's
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_parser rdb_reader)
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
triple=x86_64-unknown-linux-gnu
mkdir -p corpus/rdb_reader corpus/request_parser
cp ../tests/assets/rdb/*.rdb corpus/rdb_reader/
# Request seeds: 4 header bytes (limits, piece sizes), then client bytes.
printf '\000\005\007\013*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n' >corpus/request_parser/multibulk
printf '\003\001\002\003set "a\\x41" '"'"'b'"'"'\r\n*1\r\n$100\r\n' >corpus/request_parser/inline
for t in "${targets[@]}"; do
    cargo +nightly build --release --target "$triple" --bin "$t"
    "./target/$triple/release/$t" "corpus/$t" -max_total_time="$seconds" -max_len=4096 -malloc_limit_mb=256
done
