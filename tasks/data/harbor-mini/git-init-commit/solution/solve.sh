#!/bin/bash
set -e
cd /app/repo && git init -q && git add -A && git commit -qm initial
