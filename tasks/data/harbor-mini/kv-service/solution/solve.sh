#!/bin/bash
set -e
sed -i 's/^port=.*/port=8081/' /app/kv.conf && printf '#!/bin/sh\npython3 -c "import urllib.request as u; u.urlopen(u.Request(%s, data=b%s, method=%s))"\n' "'http://127.0.0.1:8081/color'" "'blue'" "'PUT'" > /app/seed.sh && chmod +x /app/seed.sh
