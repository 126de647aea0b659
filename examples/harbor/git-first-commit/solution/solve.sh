#!/bin/bash
set -e
cd /app
git init -q . && git add -A && git -c user.name=dev -c user.email=dev@example.com commit -qm 'Initial commit'
