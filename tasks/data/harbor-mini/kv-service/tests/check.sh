#!/bin/bash
set -e
(python3 /app/kv.py >/tmp/kv.log 2>&1 &)
for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/x', timeout=1)" 2>&1 | grep -q 404 && break; sleep 0.2; done
/app/seed.sh
python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8081/color', timeout=5).read()==b'blue' else 1)"
