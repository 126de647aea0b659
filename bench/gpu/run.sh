#!/usr/bin/env bash
# The GPU check in one command (docs/gpu.md): install the carried wheels, then run every step of
# bench/gpu/check.py, each time-boxed, each outcome recorded, one JSON summary line last.
#
#   bench/gpu/run.sh [--cpu-dry-run] [--call 1|2|3] [--wheels DIR] [--only STEP,STEP] [OUT_DIR]
#
# --call N runs the steps of call N of bench/gpu/PLAN.md (default 1; a dry run runs them all).
#
# OUT_DIR defaults to $OUT (the device tool's folder), else bench/results. DIR defaults to .whl
# (`make gpu-wheels`): its wheels are installed with --no-index --no-deps into a fresh target
# folder, so the machine's own torch and transformers are never touched. Without a wheel folder,
# Tempering is used from src/ with whatever the interpreter ($PYTHON, else python3) has.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

dry=""; wheels=".whl"; out="${OUT:-}"; only=(); call=(--call 1)
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-dry-run) dry="--cpu-dry-run" ;;
    --wheels) wheels="$2"; shift ;;
    --wheels=*) wheels="${1#--wheels=}" ;;
    --only) only=(--only "$2"); shift ;;
    --call) call=(--call "$2"); shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    -*) echo "bench/gpu/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) out="$1" ;;
  esac
  shift
done
out="${out:-$root/bench/results}"
py="${PYTHON:-python3}"
mkdir -p "$out"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

install="none: no wheel folder at $wheels, Tempering from src/"
if compgen -G "$wheels/*.whl" >/dev/null; then
  site=$(mktemp -d)/site
  start=$(date +%s)
  if timeout 120 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$wheels"/*.whl; then
    install="ok: $(ls "$wheels"/*.whl | wc -l) wheels from $wheels in $(( $(date +%s) - start ))s"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  else
    install="failed: pip install --no-index --no-deps of $wheels (see the log above); Tempering from src/"
    export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
  fi
else
  export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
fi
echo "wheel install: $install"

exec "$py" bench/gpu/check.py $dry "${call[@]}" "${only[@]}" --out "$out" --wheels "$wheels" --install "$install"
