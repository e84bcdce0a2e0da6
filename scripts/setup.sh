#!/usr/bin/env bash
# Installs maze-lab with everything its main job and its test suite need, on a fresh Debian machine.
# Usage: bash scripts/setup.sh          (package + notebook extras)
#        bash scripts/setup.sh --dev    (also test tools and headless Chromium for the browser tests)
set -euo pipefail
cd "$(dirname "$0")/.."

extras="notebook"
if [[ "${1:-}" == "--dev" ]]; then
  extras="notebook,dev"
  if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
fi
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q -c constraints.txt -e ".[${extras}]"
python -m ipykernel install --user --name python3 >/dev/null 2>&1 || true
