#!/bin/bash
set -e
cd /app/repo && [ "$(git cat-file -t v1.0)" = tag ] && git tag -n1 -l v1.0 | grep -q release
