#!/bin/bash
set -e
python3 -c "import re,json,collections; c=collections.Counter(re.search(r'\[(\w+)\]', l)[1] for l in open('/app/app.log') if ' ERROR ' in l); json.dump(c, open('/app/errors.json','w'))"
