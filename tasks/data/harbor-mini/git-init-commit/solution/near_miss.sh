#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app/repo && git init -q && git add a.py && git commit -qm initial
