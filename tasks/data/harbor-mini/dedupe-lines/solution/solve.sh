#!/bin/bash
set -e
awk '!seen[$0]++' /app/names.txt > /app/unique.txt
