#!/bin/bash
set -e
ls -S /app/files | head -n1 > /app/largest.txt
