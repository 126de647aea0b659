#!/bin/bash
set -e
cd /app
sed -i 's/\r$//' notes.txt
