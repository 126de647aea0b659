#!/bin/bash
set -e
cd /app
sed -i -e 's/^port=.*/port=9090/' -e 's/^debug=.*/debug=false/' settings.ini
