#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
sed -i 's/colour/color/' /app/src/a.txt /app/src/sub/b.txt
