#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
echo '{"api": 2}' > /app/errors.json
