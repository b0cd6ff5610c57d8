#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: redis-server
# (the reference for differential tests, and redis-cli/redis-benchmark),
# plus the deploy tests' tools: shellcheck, systemd-analyze, and openssl for
# the TLS tests' certificates. Idempotent;
# needs root or sudo only when something is missing.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v systemd-analyze >/dev/null || need+=(systemd)
# tests/tls.rs makes its CA and certificates with openssl.
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "setup-test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends --no-upgrade "${need[@]}" >/dev/null
# The package starts a system redis on 6379; the tests start their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
  $sudo systemctl stop redis-server || true
fi
if command -v service >/dev/null; then
  $sudo service redis-server stop >/dev/null 2>&1 || true
fi
