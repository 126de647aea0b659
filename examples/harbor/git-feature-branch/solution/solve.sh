#!/bin/bash
set -e
cd /app
g='git -c user.name=dev -c user.email=dev@example.com'; git init -q . && git add notes.txt && $g commit -qm base && git checkout -qb feature && echo 'on feature' > feature.txt && git add feature.txt && $g commit -qm 'add feature'
