#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
sort /app/nums.txt > /app/sorted.txt
