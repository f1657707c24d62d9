#!/bin/bash
set -e
tar -tzf /app/backup.tar.gz | grep -qx project/lib/util.py && tar -tzf /app/backup.tar.gz | grep -qx project/README && tar -tzf /app/backup.tar.gz | grep -qx project/main.py
