#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
echo 19.85 > /app/total.txt
