#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app/repo && echo on > feature.txt && git add feature.txt && git commit -qm feature
