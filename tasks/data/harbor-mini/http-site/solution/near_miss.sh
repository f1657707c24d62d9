#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
printf '#!/bin/sh\ncd /app && exec python3 -m http.server 8000 --bind 127.0.0.1\n' > /app/serve.sh && chmod +x /app/serve.sh
