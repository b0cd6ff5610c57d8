#!/usr/bin/env bash
# Installs the real client libraries that tests/apps.rs drives against
# corekv and redis-server: the Python packages pinned by tests/apps/python's
# requirements.txt (redis-py, RQ, Celery) into a virtual environment under
# target/app-deps/, and the Node packages (ioredis, redlock, BullMQ...)
# pinned by tests/apps/node's package-lock.json into
# tests/apps/node/node_modules. Idempotent and quick
# when nothing changed; needs root or sudo only when python3's venv module
# or node/npm are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
apt_install() {
  echo "setup-app-deps: installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends --no-upgrade "$@" >/dev/null
}

# Python: a venv with the pinned packages.
venv="$root/target/app-deps/venv"
requirements="$root/tests/apps/python/requirements.txt"
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  command -v python3 >/dev/null || apt_install python3 python3-venv
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements"
  cp "$requirements" "$stamp"
fi

# Node: exactly the lock file's packages.
node_dir="$root/tests/apps/node"
if ! cmp -s "$node_dir/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
  command -v npm >/dev/null || apt_install nodejs npm
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$node_dir/package-lock.json" "$node_dir/node_modules/.package-lock.json.installed"
fi
