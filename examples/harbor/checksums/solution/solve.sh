#!/bin/bash
set -e
cd /app
sha256sum dl/* | sort -k2 > SHA256SUMS
