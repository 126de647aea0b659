#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ -x /app/run.sh ] || return 1
  [ "$(cat /app/out.txt)" = "ran" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
