#!/bin/bash
set -e
cd /app
grep -rn TODO src | cut -d: -f1,2 | sort > todos.txt
