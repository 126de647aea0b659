#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(git -C /app rev-parse --abbrev-ref HEAD)" = feature ] || return 1
  [ "$(git -C /app log --format=%s | tr "\n" " ")" = "add feature base " ] || return 1
  ! git -C /app cat-file -e HEAD~1:feature.txt 2>/dev/null || return 1
  [ "$(git -C /app show HEAD:feature.txt)" = "on feature" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
