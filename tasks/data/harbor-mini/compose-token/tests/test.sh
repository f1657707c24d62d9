#!/bin/bash
# the verifier: reward 1 when /app/token.txt holds the token the api service gives now, else 0
if python3 -c "
import sys, urllib.request
token = urllib.request.urlopen('http://api:8080/token', timeout=10).read().decode()
sys.exit(0 if open('/app/token.txt').read().strip() == token else 1)
" > /logs/verifier/check.log 2>&1; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
