#!/usr/bin/env bash
# Installs maze-lab into its own virtual environment, .venv/ in this checkout, on a fresh Debian machine.
# Nothing outside the checkout is changed except Debian packages (apt-get, only when missing): no user-wide
# pip installs, no Jupyter kernels written (the notebooks use the environment's stock "python3" kernel).
#
# Usage: bash scripts/setup.sh          (package + notebook extras)
#        bash scripts/setup.sh --dev    (also the test tools and Debian's chromium for the browser tests)
# Environment: MAZE_LAB_PYTHON=/path/to/python3.X picks the interpreter (default: python3, 3.10-3.13);
#              MAZE_LAB_VENV=dir puts the environment elsewhere (default: .venv);
#              MAZE_LAB_TORCH_INDEX=url is tried for PyTorch's CPU build when no CPU wheel is at hand
#              (default: https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (valid: --dev, --help)" >&2; exit 2 ;;
  esac
done

SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
apt_install() {
  echo "setup: installing Debian packages: $*"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# --- the interpreter: python3 (3.10-3.13); Debian has no `python` command ---
py_ok() { "$1" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' 2>/dev/null; }
PY="${MAZE_LAB_PYTHON:-}"
if [[ -z "$PY" ]]; then
  for cand in python3 python3.13 python3.12 python3.11 python3.10; do
    if command -v "$cand" >/dev/null 2>&1 && py_ok "$cand"; then PY="$cand"; break; fi
  done
fi
if [[ -z "$PY" ]] || ! py_ok "$PY"; then
  echo "setup: maze-lab needs Python 3.10-3.13; found: $(command -v python3 || echo 'no python3') " \
       "$(python3 --version 2>&1 || true). Install one (apt-get install python3) or set MAZE_LAB_PYTHON." >&2
  exit 1
fi

# --- the virtual environment (Debian's system Python is externally managed, PEP 668) ---
VENV="${MAZE_LAB_VENV:-.venv}"
if [[ ! -x "$VENV/bin/python" ]] || ! py_ok "$VENV/bin/python"; then
  rm -rf "$VENV"
  if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian ships venv/ensurepip in a separate package
    rm -rf "$VENV"
    ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${ver}-venv" || apt_install python3-venv
    "$PY" -m venv "$VENV"
  fi
  echo "setup: created the virtual environment $VENV ($("$VENV/bin/python" --version))"
fi
VPY="$VENV/bin/python"
pip_q() { "$VPY" -m pip install -q --disable-pip-version-check "$@"; }
pip_q --upgrade pip >/dev/null 2>&1 || true

# --- PyTorch: the CPU build wherever one can be had (a plain PyPI torch on Linux is the multi-GB CUDA build) ---
torch_pin=$(grep -E '^torch==' constraints.txt | head -1)
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  # Ask pip which file the pin resolves to, without downloading it.
  resolved=$("$VPY" -m pip install --dry-run --no-deps --quiet --report - "$torch_pin" 2>/dev/null \
             | "$VPY" -c 'import json,sys; r=json.load(sys.stdin)["install"]; print(r[0]["download_info"]["url"] if r else "")' \
             2>/dev/null || true)
  if [[ "$(uname -s)" != "Linux" || "$resolved" == *"+cpu"* ]]; then
    pip_q "$torch_pin"
  else
    index="${MAZE_LAB_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
    echo "setup: no CPU wheel of $torch_pin at hand; trying PyTorch's CPU index $index"
    if ! pip_q --retries 1 --timeout 20 --index-url "$index" "$torch_pin"; then
      echo "setup: WARNING: PyTorch's CPU index is not reachable; installing $torch_pin from PyPI," \
           "which on Linux is the CUDA build (several GB)." >&2
      pip_q "$torch_pin"
    fi
  fi
fi

# --- Graphviz: its dot lays out the model graphs (without it they get a plain fallback layout) ---
if ! command -v dot >/dev/null 2>&1; then
  apt_install graphviz || echo "setup: WARNING: graphviz not installed; model graphs get the plain fallback layout" >&2
fi

# --- maze-lab itself, editable, with the pins of constraints.txt ---
extras="notebook,scale"
if [[ $dev -eq 1 ]]; then
  extras="notebook,scale,dev"
  if [[ ! -x /usr/bin/chromium ]]; then apt_install chromium; fi
fi
pip_q -c constraints.txt -e ".[${extras}]"

# --- no kernel of its own: the notebooks name Jupyter's stock "python3" kernel, which ipykernel brings into the
# environment (jupyter prefers the environment's kernel specs to a user-wide one) and which starts this environment's
# Python; nothing is written to the user's kernels

# --- with --dev in a git checkout: notebooks are committed without outputs. nbstripout is the clean filter of *.ipynb
# (.gitattributes), set in this checkout's own .git/config only: `git add` strips outputs, the files stay as they are
if [[ $dev -eq 1 ]] && git rev-parse --git-dir >/dev/null 2>&1; then
  vpy_abs="$(cd "$(dirname "$VPY")" && pwd)/$(basename "$VPY")"
  git config --local filter.nbstripout.clean "\"$vpy_abs\" -m nbstripout --keep-id"
  git config --local filter.nbstripout.smudge cat
  git config --local diff.ipynb.textconv "\"$vpy_abs\" -m nbstripout --keep-id -t"
fi

echo "setup: done. Commands run from $VENV/bin (e.g. $VENV/bin/maze-lab --help), or 'source $VENV/bin/activate' first."
