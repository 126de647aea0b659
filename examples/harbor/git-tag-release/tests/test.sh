#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  [ "$(git -C /app cat-file -t v1.0.0)" = tag ] || return 1
  [ "$(git -C /app for-each-ref refs/tags/v1.0.0 --format='%(contents:subject)')" = "first release" ] || return 1
  [ "$(git -C /app rev-parse v1.0.0^{commit})" = "$(git -C /app rev-parse HEAD)" ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
