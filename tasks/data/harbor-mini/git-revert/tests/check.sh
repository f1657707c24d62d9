#!/bin/bash
set -e
cd /app/repo && grep -q 'return a + b' calc.py && [ $(git rev-list --count HEAD) = 3 ] && [ -z "$(git status --porcelain)" ]
