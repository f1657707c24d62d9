#!/bin/bash
set -e
python3 -c "import csv; print(f\"{sum(float(r['amount']) for r in csv.DictReader(open('/app/sales.csv'))):.2f}\")" > /app/total.txt
