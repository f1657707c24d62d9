#!/bin/bash
set -e
printf '#!/bin/sh\ncd /app/site && exec python3 -m http.server 8000 --bind 127.0.0.1\n' > /app/serve.sh && chmod +x /app/serve.sh
