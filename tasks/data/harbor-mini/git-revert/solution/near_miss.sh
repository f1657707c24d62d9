#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app/repo && git reset -q --hard HEAD~1
