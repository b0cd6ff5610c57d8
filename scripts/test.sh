#!/usr/bin/env bash
# Runs the whole test suite: installs what the tests need (redis-server as
# the differential reference, shellcheck, systemd-analyze, and the client
# libraries the app tests drive: redis-py, redlock, rate-limiter-flexible,
# BullMQ, RQ, Celery),
# then every crate's unit, property and end-to-end tests. Extra arguments go to
# `cargo test` (e.g. scripts/test.sh --test differential).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-test-deps.sh
scripts/setup-app-deps.sh
cargo test --workspace -j2 "$@"
