#!/bin/bash
set -e
cd /app
cd data && find . -type f -printf '%s %P\n' | sort -n | tail -n 1 | cut -d' ' -f2 > /app/answer.txt
