#!/bin/bash
# a near miss: the health answer, not the token
set -e
python3 -c "import urllib.request; open('/app/token.txt', 'w').write(urllib.request.urlopen('http://api:8080/health', timeout=10).read().decode())"
