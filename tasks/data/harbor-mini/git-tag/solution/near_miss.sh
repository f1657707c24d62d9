#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
cd /app/repo && git tag v1.0
