#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(tar -tzf /app/backup.tar.gz | grep -v '/$' | sort | tr '\n' ' ')" = "project/README.md project/src/main.py project/src/util.py " ] || return 1
  [ "$(tar -xzOf /app/backup.tar.gz project/src/util.py)" = "X = 1" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
