#!/bin/bash
set -e
grep -qx PORT=9090 /app/.env && grep -qx NAME=demo /app/.env && grep -qx DEBUG=0 /app/.env && [ $(wc -l < /app/.env) = 3 ]
