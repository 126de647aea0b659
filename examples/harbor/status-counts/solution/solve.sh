#!/bin/bash
set -e
cd /app
python3 -c "import json, collections; c = collections.Counter(l.split()[8] for l in open('access.log') if l.strip()); json.dump(c, open('status.json', 'w'))"
