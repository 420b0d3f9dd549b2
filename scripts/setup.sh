#!/usr/bin/env bash
# Installs what halbench needs on a Debian machine, idempotently:
#   system packages (Vulkan loader, Mesa's lavapipe, the Khronos validation layer, Python venv)
#   through apt-get when running as root (otherwise it names what to install and stops),
#   then a virtual environment in .venv with halbench and its compiler, test and fleet extras.
# Usage: scripts/setup.sh            (from anywhere; paths are relative to the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(python3 python3-venv python3-pip libvulkan1 mesa-vulkan-drivers vulkan-validationlayers chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# The venv is rebuilt only when pyproject.toml changes (a stamp records its hash).
stamp=.venv/.halbench-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
# A changed pyproject.toml gets a fresh venv, so that nothing it no longer asks for stays behind
# (what passes here then passes on CI's fresh clone). pip keeps no cache: CI's disk is small.
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing halbench into a new .venv (a few minutes)"
  rm -rf .venv
  python3 -m venv .venv
  export PIP_NO_CACHE_DIR=1
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[compiler,test,fleet]'
  echo "$want" > "$stamp"
fi
