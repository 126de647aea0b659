#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {
  python3 -I -c "import json, sys; d = json.load(open('/app/status.json')); sys.exit(0 if d == {'200': 3, '404': 2, '500': 1, '301': 1} else 1)" || return 1
}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
