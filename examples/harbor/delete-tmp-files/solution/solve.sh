#!/bin/bash
set -e
cd /app
find scratch -name '*.tmp' -type f -delete
