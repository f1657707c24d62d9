#!/usr/bin/env bash
# Start a Docker engine in the background unless one already answers; wait until `docker info`
# works. Idempotent: safe to call again. Used by CI after `apt-get install -y docker.io`.
#   DOCKERD_LOG   where dockerd writes its log (default /tmp/dockerd.log)
#   DOCKERD_WAIT  seconds to wait for the engine (default 60)
set -euo pipefail

log="${DOCKERD_LOG:-/tmp/dockerd.log}"
wait_s="${DOCKERD_WAIT:-60}"

if ! command -v docker >/dev/null 2>&1; then
  echo "start-dockerd: the docker CLI is missing (apt-get install -y docker.io)" >&2
  exit 3
fi
if docker info >/dev/null 2>&1; then
  echo "start-dockerd: engine already running" >&2
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "start-dockerd: dockerd is missing (apt-get install -y docker.io)" >&2
  exit 3
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "start-dockerd: needs root or sudo" >&2; exit 3; }
  sudo="sudo -n"
fi

# A dockerd already starting (pid file present, process alive) is waited for, not doubled.
pidfile=/var/run/docker.pid
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "start-dockerd: dockerd $(cat "$pidfile") is starting; waiting" >&2
else
  # containerd is started by dockerd itself when no system containerd runs.
  echo "start-dockerd: starting dockerd (log: $log)" >&2
  $sudo nohup dockerd >"$log" 2>&1 </dev/null &
fi

for _ in $(seq 1 "$wait_s"); do
  if docker info >/dev/null 2>&1; then
    echo "start-dockerd: engine ready ($(docker version --format '{{.Server.Version}}'))" >&2
    exit 0
  fi
  sleep 1
done
echo "start-dockerd: engine did not answer within ${wait_s}s; last log lines:" >&2
tail -n 20 "$log" >&2 || true
exit 3
