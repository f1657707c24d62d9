#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
sort -u /app/names.txt > /app/unique.txt
