#!/bin/bash
set -e
cd /app
awk '!seen[$0]++' list.txt > list.new && mv list.new list.txt
