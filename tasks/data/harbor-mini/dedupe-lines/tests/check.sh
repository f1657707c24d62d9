#!/bin/bash
set -e
[ "$(cat /app/unique.txt | tr "\n" ,)" = "carol,alice,bob,dave," ]
