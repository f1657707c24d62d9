#!/bin/bash
set -e
cd /app/repo && git rev-parse -q --verify feature >/dev/null && git cat-file -e feature:feature.txt && ! git cat-file -e main:feature.txt 2>/dev/null && [ $(git rev-list --count main) = 1 ]
