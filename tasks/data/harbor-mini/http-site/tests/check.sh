#!/bin/bash
set -e
(/app/serve.sh >/tmp/serve.log 2>&1 &)
for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=1)" 2>/dev/null && break; sleep 0.2; done
python3 -c "import urllib.request,sys; t=urllib.request.urlopen('http://127.0.0.1:8000/index.html', timeout=5).read().decode(); sys.exit(0 if 'harbor mini' in t else 1)"
