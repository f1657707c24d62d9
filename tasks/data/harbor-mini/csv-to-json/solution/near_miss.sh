#!/bin/bash
# a plausible wrong solution (orchard's own addition): must fail
python3 -c "import csv,json; json.dump(list(csv.DictReader(open('/app/people.csv'))), open('/app/people.json','w'))"
