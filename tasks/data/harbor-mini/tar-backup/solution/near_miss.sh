#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app && tar -czf backup.tar.gz project/main.py
