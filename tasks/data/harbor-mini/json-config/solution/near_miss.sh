#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
python3 - <<'EOF'
import json
c=json.load(open('/app/config.json'))
c.update(debug=True, port='8080')
json.dump(c, open('/app/config.json','w'))
EOF
