#!/bin/bash
# Harbor verifier: partial credit, the share of fixed functions, written to reward.json.
mkdir -p /logs/verifier
nonce=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
out=$(echo "$nonce" | python3 -I -B /tests/check_textutils.py 2>/dev/null | tail -n 1)
passed=0
case "$out" in "passed $nonce "[0-4]) passed=${out##* } ;; esac
python3 -I -c "import json, sys; n = int(sys.argv[1]); json.dump({'reward': n / 4, 'passed': n}, open('/logs/verifier/reward.json', 'w'))" "$passed"
