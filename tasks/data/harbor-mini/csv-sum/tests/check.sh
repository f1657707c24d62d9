#!/bin/bash
set -e
[ "$(tr -d "[:space:]" < /app/total.txt)" = 23.35 ]
