#!/bin/bash
set -e
! grep -rq colour /app/src && grep -qx 'colorful color' /app/src/a.txt && grep -qx 'no change here' /app/src/sub/b.txt
