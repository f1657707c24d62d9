#!/usr/bin/env bash
# Install everything the test suite needs and run it. What CI runs (.ci/run calls this).
# Prerequisites are installed, not skipped: Docker engine, bubblewrap, Chromium, the harnesses.
# Only tests needing a ZeroClaw binary or a real Kubernetes cluster may skip.
set -euo pipefail
cd "$(dirname "$0")/.."

ORCHARD_EXTRAS="all,test" ORCHARD_APT_EXTRA="docker.io chromium debootstrap" ./scripts/install.sh
./scripts/start-dockerd.sh
./scripts/install-harnesses.sh          # pinned Node 24, Codex CLI and OpenClaw under .harnesses/

export ORCHARD_TEST_STRICT=1   # a missing prerequisite fails the run instead of skipping
exec .venv/bin/python -m pytest -q --durations=30 "$@"
