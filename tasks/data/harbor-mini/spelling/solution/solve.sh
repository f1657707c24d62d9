#!/bin/bash
set -e
grep -rl colour /app/src | xargs sed -i 's/colour/color/g'
