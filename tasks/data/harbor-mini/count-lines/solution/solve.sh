#!/bin/bash
set -e
wc -l < /app/data.txt | tr -d ' ' > /app/count.txt
