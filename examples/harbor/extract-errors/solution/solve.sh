#!/bin/bash
set -e
cd /app
awk '$3 == "ERROR"' app.log > errors.log
