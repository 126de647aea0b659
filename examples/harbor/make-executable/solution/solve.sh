#!/bin/bash
set -e
cd /app
chmod +x run.sh && ./run.sh
