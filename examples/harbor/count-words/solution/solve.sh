#!/bin/bash
set -e
cd /app
wc -w < essay.txt | tr -d ' ' > count.txt
