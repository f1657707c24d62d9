#!/bin/bash
set -e
[ "$(tr -d "[:space:]" < /app/count.txt)" = 37 ]
