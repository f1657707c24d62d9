#!/bin/bash
set -e
cd /app/repo && git checkout -qb feature && echo on > feature.txt && git add feature.txt && git commit -qm feature
