#!/usr/bin/env bash
# `make gpu-wheels`: the wheel folder that travels to a GPU machine with bench/gpu/run.sh.
#
#   bench/gpu/make_wheels.sh [DIR]      (DIR defaults to .whl, git-ignored)
#
# DIR gets: the wheels of bench/gpu/wheels.txt for CPython 3.12 manylinux x86_64 (pinned, no
# dependencies followed), Tempering's own wheel, and smollm2-tokenizer/ (the default model's
# tokenizer, saved from its GGUF: the 98 MB GGUF itself is over the 64 MiB that travels).
# Fails when the folder is over 60 MiB, leaving room for the working tree.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dir="${1:-.whl}"
py="${PYTHON:-$root/.venv/bin/python}"
rm -rf "$dir"
mkdir -p "$dir"
platforms=()
for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
grep -v -e '^#' -e '^$' bench/gpu/wheels.txt | sed 's/[[:space:]]*#.*//' > "$dir/.requirements"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dir" -r "$dir/.requirements"
rm "$dir/.requirements"
"$py" -m pip wheel -q --no-deps --no-build-isolation -w "$dir" .
rm -rf build
"$py" -c "
import sys
from tempering.models.load import load_tokenizer
load_tokenizer('smollm2-135m-instruct').save_pretrained(sys.argv[1])
" "$dir/smollm2-tokenizer"
size=$(du -sb "$dir" | cut -f1)
echo "$dir: $(ls "$dir"/*.whl | wc -l) wheels + smollm2-tokenizer/, $(( size / 1024 / 1024 )) MiB ($size bytes)"
if [ "$size" -gt $(( 60 * 1024 * 1024 )) ]; then
  echo "$dir is over 60 MiB: it would not travel with the working tree (64 MiB in all)" >&2
  exit 1
fi
