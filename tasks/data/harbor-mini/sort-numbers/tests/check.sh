#!/bin/bash
set -e
[ "$(tr "\n" , < /app/sorted.txt)" = "-3,9,10,42,100," ]
