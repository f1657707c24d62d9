#!/bin/bash
# the verifier: reads the store service's state; reward = the share of users stored right
python3 - > /logs/verifier/check.log 2>&1 <<'PY'
import csv, os, urllib.request
rows = list(csv.DictReader(open("/tests/users.csv")))
good = 0
for row in rows:
    try:
        got = urllib.request.urlopen(f"{os.environ['STORE_URL']}/kv/user:{row['name']}", timeout=10).read().decode()
    except Exception as exc:
        got = f"<{exc}>"
    print(row["name"], repr(got))
    good += got.strip() == row["email"]
open("/logs/verifier/reward.txt", "w").write(f"{good / len(rows):g}\n")
PY
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
