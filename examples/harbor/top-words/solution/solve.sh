#!/bin/bash
set -e
cd /app
tr -cs 'A-Za-z' '\n' < words.txt | tr A-Z a-z | grep . | sort | uniq -c | sort -rn | head -n 3 | awk '{print $2, $1}' > top.txt
