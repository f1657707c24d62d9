#!/usr/bin/env bash
# Claw-Eval's sandbox image (claw-eval-agent:latest) for `bench/claw_eval_bench.py --vs-runner
# --runner-sandbox docker`, made without a registry: orchard's Debian base image (orchard/base:bookworm,
# made by orchard's docker backend), the checkout's sandbox server (src/claw_eval/sandbox/) and its
# requirements-sandbox-server.txt installed with uv from PyPI. What Claw-Eval's Dockerfile.agent
# adds beyond that (ffmpeg, poppler, Playwright's Chromium: the video, PDF and browser tools) is
# left out: the tasks whose tools are HTTP services and the shell do not use them.
#
#   bench/claw_eval_runner_image.sh PATH/TO/claw-eval
set -euo pipefail
checkout=$(cd "${1:?usage: claw_eval_runner_image.sh PATH/TO/claw-eval}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
uv=$(command -v uv || echo "$here/.venv/bin/uv")
docker image inspect orchard/base:bookworm >/dev/null 2>&1 || {
    echo "no orchard/base:bookworm image: run any docker episode of orchard first (orchard env up -b docker)" >&2; exit 2; }
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$checkout/requirements-sandbox-server.txt" "$context/requirements.txt"
cp -r "$checkout/src/claw_eval/sandbox" "$context/sandbox"
cp "$uv" "$context/uv"
cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"   # a TLS-inspecting proxy's root, if any
cat > "$context/Dockerfile" <<'DOCKERFILE'
FROM orchard/base:bookworm
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY uv /usr/local/bin/uv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt UV_NATIVE_TLS=1
WORKDIR /workspace
COPY requirements.txt /tmp/requirements.txt
RUN uv venv -q /opt/venv --python /usr/bin/python3 && uv pip install -q --python /opt/venv/bin/python -r /tmp/requirements.txt
COPY sandbox/ /opt/sandbox/
EXPOSE 8080
ENTRYPOINT ["python", "/opt/sandbox/server.py", "--port", "8080"]
DOCKERFILE
docker build -q -t claw-eval-agent:latest "$context"
