#!/bin/bash
set -e
cd /app
cat > stats/mean.py <<'EOF'
def mean(values):
    if not values:
        return 0.0
    return sum(values) / len(values)
EOF
