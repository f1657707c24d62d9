#!/bin/bash
set -e
python3 -c "import json,sys; d=json.load(open('/app/people.json')); sys.exit(0 if d==[{'name':'Ada','age':36,'city':'London'},{'name':'Linus','age':28,'city':'Helsinki'}] else 1)"
