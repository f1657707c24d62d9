#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
sed -i 's/^port=.*/port=8081/' /app/kv.conf && printf '#!/bin/sh\ntrue\n' > /app/seed.sh && chmod +x /app/seed.sh
