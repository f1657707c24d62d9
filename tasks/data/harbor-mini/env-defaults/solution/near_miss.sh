#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cp /app/.env.example /app/.env
