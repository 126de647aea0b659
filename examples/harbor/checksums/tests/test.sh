#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  (cd /app && sha256sum --quiet -c SHA256SUMS) || return 1
  [ "$(awk '{print $2}' /app/SHA256SUMS | tr '\n' ' ')" = "dl/a.bin dl/b.bin dl/c.iso " ] || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
