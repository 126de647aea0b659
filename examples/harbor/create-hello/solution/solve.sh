#!/bin/bash
set -e
cd /app
echo 'Hello, Harbor!' > /app/hello.txt
