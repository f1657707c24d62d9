#!/bin/bash
set -e
[ "$(stat -c %a /app/secret.txt)" = 600 ]
