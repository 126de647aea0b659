#!/bin/bash
set -e
cd /app
grep -oiE '[a-z0-9.]+@[a-z0-9.]+\.[a-z]+' contacts.txt | tr A-Z a-z | sort -u > emails.txt
