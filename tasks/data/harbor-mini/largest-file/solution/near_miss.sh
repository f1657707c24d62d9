#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
ls -S /app/files | sed -n 2p > /app/largest.txt
