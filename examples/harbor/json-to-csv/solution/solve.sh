#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import json
users = json.load(open('users.json'))
with open('users.csv', 'w') as f:
    f.write('name,age\n')
    for u in users:
        f.write(f"{u['name']},{u['age']}\n")
EOF
