#!/bin/bash
set -e
[ "$(tr -d "[:space:]" < /app/largest.txt)" = big.bin ]
