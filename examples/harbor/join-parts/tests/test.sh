#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(cat /app/whole.txt | tr "\n" " ")" = "alpha beta gamma " ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
