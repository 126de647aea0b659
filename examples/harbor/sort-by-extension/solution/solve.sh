#!/bin/bash
set -e
cd /app
for f in inbox/*; do e="${f##*.}"; mkdir -p "sorted/$e"; mv "$f" "sorted/$e/"; done
