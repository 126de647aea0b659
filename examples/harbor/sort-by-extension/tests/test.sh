#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ -z "$(ls -A /app/inbox)" ] || return 1
  [ "$(cd /app/sorted && find . -type f | sort | tr "\n" " ")" = "./csv/c.csv ./md/d.md ./txt/a.txt ./txt/b.txt " ] || return 1
  [ "$(cat /app/sorted/csv/c.csv)" = "x,y" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
