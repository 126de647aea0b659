#!/bin/bash
set -e
cd /app
git apply fix.patch
