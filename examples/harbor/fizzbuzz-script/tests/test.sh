#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(cat <(bash /app/fizz.sh 15))" = "$(cat /tests/expected15.txt)" ] || return 1
  [ "$(bash /app/fizz.sh 2 | tr "\n" " ")" = "1 2 " ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
