#!/bin/bash
set -e
cd /app/repo && [ "$(git log -1 --format=%s)" = initial ] && [ -z "$(git status --porcelain)" ]
