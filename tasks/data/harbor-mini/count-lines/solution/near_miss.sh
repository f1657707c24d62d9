#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
echo 36 > /app/count.txt
