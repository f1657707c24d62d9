#!/bin/bash
set -e
[ -f /app/docs/a.md ] && [ -f /app/docs/b.md ] && [ ! -e /app/docs/a.txt ] && [ ! -e /app/docs/b.txt ] && [ -f /app/docs/keep.csv ]
