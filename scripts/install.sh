#!/usr/bin/env bash
# Install orchard on a fresh Debian/Ubuntu machine: system packages the embedded default needs
# (bubblewrap for local sandboxes, git, patch), then a virtual environment in .venv with every
# Python dependency pinned by constraints.txt. Idempotent; safe to re-run.
#
#   ORCHARD_EXTRAS   extras to install (default: the embedded default's)
#   ORCHARD_PYTHON   interpreter for the venv (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[install]\033[0m %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
command -v git >/dev/null || need_apt+=(git)
command -v patch >/dev/null || need_apt+=(patch)
[ -x /usr/lib/chromium/chromium-headless-shell ] || need_apt+=(chromium-headless-shell)   # web tasks
for pkg in ${ORCHARD_APT_EXTRA:-}; do need_apt+=("$pkg"); done
if [ ${#need_apt[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    say "apt-get install ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    say "please install: ${need_apt[*]} (no apt-get here)"
  fi
fi

PY="${ORCHARD_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
EXTRAS="${ORCHARD_EXTRAS:-default}"
say "pip install -e .[$EXTRAS] (pinned by constraints.txt)"
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[$EXTRAS]"
# The official SWE-bench grader (specs and log parsers) without its heavy dependencies (modal,
# docker, ghapi, ...): orchard imports only the parts it needs.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps swebench==4.1.0
# MiniWoB++'s tasks (HTML and JavaScript) for `orchard eval miniwob`, without its gym and selenium.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps miniwob==1.1.0
[ "${ORCHARD_NO_MODEL:-}" = 1 ] || ./scripts/install-model.sh   # the embedded default model
say "done: $(.venv/bin/orchard --version)"
