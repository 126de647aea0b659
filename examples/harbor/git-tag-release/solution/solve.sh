#!/bin/bash
set -e
cd /app
g='git -c user.name=dev -c user.email=dev@example.com'; git init -q . && git add -A && $g commit -qm v1 && $g tag -a v1.0.0 -m 'first release'
