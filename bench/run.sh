#!/usr/bin/env bash
# Side-by-side benchmark suites: corekv vs redis-server on the same pinned
# CPUs, the load generator on the others. Builds corekv and the runner in
# release, installs redis-server if missing, runs the suites, and writes
# bench/results/<suite>.json, bench/plots/<suite>-*.svg and the generated
# sections of bench/RESULTS.md.
#
#   bench/run.sh [--server-cpus LIST] [--client-cpus LIST] [--quick] [suite... | all]
#
# Suites: qos get-small get-large set-mixed skewed pipeline scaling memory
# (default: all, about 12 minutes on 2 cores; --quick: a few minutes, a
# smoke test whose figures are marked as such). CPUs default to the first
# half of this process's affinity mask for the servers and the rest for the
# load generator (2 cores: servers on CPU 0, load generator on CPU 1).
# More options: target/release/corekv-suite --help (e.g. --large-keys,
# --memory-keys, --seconds, --warmup, --report-only).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust first (https://rustup.rs)" >&2; exit 2; }
target=${CARGO_TARGET_DIR:-target}
cargo build --release -j2 -q -p corekv -p corekv-bench
command -v redis-server >/dev/null || scripts/setup-test-deps.sh
exec "$target/release/corekv-suite" --corekv "$target/release/corekv" "$@"
