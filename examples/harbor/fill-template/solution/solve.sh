#!/bin/bash
set -e
cd /app
cp template.txt letter.txt; while IFS== read -r k v; do sed -i "s/{{$k}}/$v/g" letter.txt; done < values.env
