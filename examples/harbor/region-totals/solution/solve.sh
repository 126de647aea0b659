#!/bin/bash
set -e
cd /app
(echo region,total; tail -n +2 sales.csv | awk -F, '{t[$1]+=$2} END {for (r in t) print r","t[r]}' | sort) > totals.csv
