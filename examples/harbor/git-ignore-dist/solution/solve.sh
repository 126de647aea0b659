#!/bin/bash
set -e
cd /app
printf 'dist/\n*.log\n' > .gitignore && git init -q . && git add -A && git -c user.name=dev -c user.email=dev@example.com commit -qm 'add sources'
