#!/bin/bash
set -e
cd /app/repo && git revert --no-edit HEAD >/dev/null
