#!/bin/bash
set -e
cd /app
cat > wordfreq/count.py <<'EOF'
import re
from collections import Counter


def count_words(text):
    return dict(Counter(re.findall(r"[a-z']+", text.lower())))
EOF
