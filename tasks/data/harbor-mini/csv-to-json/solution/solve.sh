#!/bin/bash
set -e
python3 -c "import csv,json; rows=list(csv.DictReader(open('/app/people.csv')));
for r in rows: r['age']=int(r['age'])
json.dump(rows, open('/app/people.json','w'))"
