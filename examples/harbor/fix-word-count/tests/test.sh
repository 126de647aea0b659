#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  nonce=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') || return 1
  out=$(echo "$nonce" | python3 -I -B /tests/check_fix_word_count.py 2>&1 | tail -n 1) || return 1
  [ "$out" = "passed $nonce" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
