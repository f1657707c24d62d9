#!/bin/bash
set -e
sed 's/^PORT=.*/PORT=9090/' /app/.env.example > /app/.env
