#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
printf 'best: ben\nmean: 81\n' > /app/report.txt
