#!/bin/bash
set -e
sort -n /app/nums.txt > /app/sorted.txt
