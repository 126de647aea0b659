#!/bin/bash
set -e
cd /app
tac poem.txt > reversed.txt
