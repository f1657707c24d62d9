#!/bin/bash
# two named rewards: each line of the report on its own
best=0; mean=0
grep -qx 'best: ben' /app/report.txt 2>/dev/null && best=1
grep -qx 'mean: 81.3' /app/report.txt 2>/dev/null && mean=1
printf '{"best": %s, "mean": %s}\n' $best $mean > /logs/verifier/reward.json
