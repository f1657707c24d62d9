#!/bin/bash
set -e
python3 -c "import json,sys; c=json.load(open('/app/config.json')); sys.exit(0 if c=={'name':'svc','debug':True,'port':8080,'workers':4} else 1)"
