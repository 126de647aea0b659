#!/bin/bash
set -e
cd /app
for i in $(ls parts | sed 's/[^0-9]//g' | sort -n); do cat parts/part$i.txt; done > whole.txt
