#!/bin/bash
set -e
cd /app/repo && git tag -a v1.0 -m release
