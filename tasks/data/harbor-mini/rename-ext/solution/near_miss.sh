#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app/docs && mv a.txt a.md
