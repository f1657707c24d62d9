#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
chmod 640 /app/secret.txt
