#!/bin/bash
# a near miss: a shell loop that drops the last user (the file does not end in a newline)
set -e
tail -n +2 /app/users.csv | while IFS=, read -r name email; do
  python3 -c "import os, sys, urllib.request as u; u.urlopen(u.Request(os.environ['STORE_URL'] + '/kv/user:' + sys.argv[1], data=sys.argv[2].encode(), method='PUT'), timeout=10)" "$name" "$email"
done
