#!/bin/bash
set -e
python3 - <<'EOF'
import json
c=json.load(open('/app/config.json'))
c.update(debug=True, port=8080)
json.dump(c, open('/app/config.json','w'), indent=2)
EOF
