#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(git -C /app log --format=%s)" = "Initial commit" ] || return 1
  [ "$(git -C /app ls-files | tr "\n" " ")" = "README.md main.py " ] || return 1
  [ -z "$(git -C /app status --porcelain)" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
