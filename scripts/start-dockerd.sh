#!/usr/bin/env bash
# Start a Docker engine in the background unless one already answers; wait until `docker info`
# works. Idempotent: safe to call again. Used by CI after `apt-get install -y docker.io`.
#   DOCKERD_LOG   where dockerd writes its log (default /tmp/dockerd.log)
#   DOCKERD_WAIT  seconds to wait for the engine (default 60)
#   DOCKERD_PIDFILE  the pid file dockerd writes (default /var/run/docker.pid)
# Exit codes: 0 engine ready, 3 no engine (the log's last lines are printed).
set -euo pipefail

log="${DOCKERD_LOG:-/tmp/dockerd.log}"
wait_s="${DOCKERD_WAIT:-60}"

say() { echo "start-dockerd: $*" >&2; }

command -v docker >/dev/null 2>&1 || { say "the docker CLI is missing (apt-get install -y docker.io)"; exit 3; }
if docker info >/dev/null 2>&1; then
  say "engine already running ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi
command -v dockerd >/dev/null 2>&1 || { say "dockerd is missing (apt-get install -y docker.io)"; exit 3; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { say "starting dockerd needs root or sudo"; exit 3; }
  sudo="sudo -n"
fi

# Wait for the engine while the process `$1` lives; 0 once `docker info` answers.
wait_for() {
  local pid=$1
  for _ in $(seq 1 "$wait_s"); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

start() {
  say "starting dockerd $* (log: $log)"
  $sudo nohup dockerd "$@" >>"$log" 2>&1 </dev/null &
  wait_for $!
}

pidfile="${DOCKERD_PIDFILE:-/var/run/docker.pid}"
# A containerd pid file left by an engine that died names a pid the system may have given to
# another process since: dockerd then waits for "containerd still running" and gives up.
stale=/var/run/docker/containerd/containerd.pid
if [ -s "$stale" ] && ! grep -qa containerd "/proc/$(cat "$stale")/cmdline" 2>/dev/null; then
  say "removing $stale (its process $(cat "$stale") is not containerd)"
  $sudo rm -f "$stale"
fi
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  say "dockerd $(cat "$pidfile") is already starting; waiting for it"
  wait_for "$(cat "$pidfile")" && ready=1 || ready=0
else
  : >"$log" 2>/dev/null || true
  start && ready=1 || ready=0
  # Containers without the kernel's netfilter modules: bridge networking without iptables rules.
  if [ "$ready" = 0 ] && grep -qi iptables "$log" 2>/dev/null && ! docker info >/dev/null 2>&1; then
    start --iptables=false --ip6tables=false && ready=1 || ready=0
  fi
fi

if [ "$ready" = 1 ]; then
  say "engine ready ($(docker version --format '{{.Server.Version}}'))"
  exit 0
fi
say "no engine answered within ${wait_s}s; last lines of $log:"
tail -n 20 "$log" >&2 || true
exit 3
