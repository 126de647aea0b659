#!/bin/bash
set -e
cd /app
ln -s "releases/$(ls releases | sort -V | tail -n 1)" current
