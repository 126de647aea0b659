#!/usr/bin/env bash
# The clean-venv check of the wheel folder (docs/gpu.md): a fresh Python 3.12 venv holding only what
# the GPU machines' image holds that Tempering touches (torch 2.11.0, transformers 5.17.0 and the
# image's versions of accelerate, huggingface-hub, numpy, safetensors, tokenizers; peft, pyarrow,
# typer, rich, pandas... from PyPI), none of the packages of bench/gpu/wheels.txt, then
# `import tempering` from the wheel folder and `bench/gpu/run.sh --cpu-dry-run` with it.
#
#   bench/gpu/check_wheels.sh [VENV_DIR]   (default /tmp/tempering-wheels-check; .whl must exist)
#
# PyPI's torch 2.11.0 for Linux x86_64 is a CUDA build; with its nvidia-* packages installed it
# runs on a CPU. Writes bench/results/gpu_wheels_check.json.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv="${1:-/tmp/tempering-wheels-check}"
python312="${PYTHON312:-/root/.pyenv/versions/3.12.1/bin/python3.12}"
out=$(mktemp -d)
[ -n "$(ls .whl/*.whl 2>/dev/null)" ] || { echo "no .whl/*.whl: run make gpu-wheels first" >&2; exit 2; }

if [ ! -x "$venv/bin/python" ]; then
  "$python312" -m venv "$venv" || exit 1
fi
image=(torch==2.11.0 transformers==5.17.0 accelerate==1.15.0 huggingface-hub==1.33.0 numpy==2.5.2
       safetensors==0.8.0 tokenizers==0.23.2 peft pyarrow typer rich pyyaml jinja2 pandas fsspec xxhash
       psutil matplotlib scipy scikit-learn statsmodels prometheus-client httpx requests tqdm filelock
       packaging pytest)
"$venv/bin/pip" install -q "${image[@]}" || exit 1
# Whatever pulled in a carried package (typer's newer releases pull pydantic) is not the image: take it out.
carried=$(grep -v -e '^#' -e '^$' bench/gpu/wheels.txt | sed 's/[[:space:]]*#.*//; s/==.*//')
"$venv/bin/pip" uninstall -q -y $carried tempering 2>/dev/null
left=$("$venv/bin/pip" list --format freeze 2>/dev/null | cut -d= -f1 | tr 'A-Z_' 'a-z-' \
       | grep -x -F "$(echo "$carried" | tr 'A-Z_' 'a-z-')" || true)
[ -z "$left" ] || { echo "the venv still holds carried packages: $left" >&2; exit 1; }

start=$(date +%s)
PYTHON="$venv/bin/python" bench/gpu/run.sh --cpu-dry-run --wheels .whl "$out" > "$out/run.out" 2>&1
rc=$?
seconds=$(( $(date +%s) - start ))
tail -3 "$out/run.out"

"$venv/bin/python" - "$out" "$rc" "$seconds" "$venv" <<'PY'
import json, subprocess, sys, time
from pathlib import Path

out, rc, seconds, venv = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, "bench")
from _shared.paths import RESULTS  # noqa: E402

freeze = subprocess.run([f"{venv}/bin/pip", "list", "--format", "freeze"], capture_output=True, text=True).stdout
wheels = sorted(p.name for p in Path(".whl").glob("*.whl"))
size = sum(p.stat().st_size for p in Path(".whl").rglob("*") if p.is_file())
report = json.loads((out / "gpu_cpu_dry_run.json").read_text()) if (out / "gpu_cpu_dry_run.json").is_file() else {}
result = {
    "check": "clean venv: the GPU image's torch/transformers + .whl alone, bench/gpu/run.sh --cpu-dry-run",
    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    "python": sys.version.split()[0],
    "venv_packages": freeze.split(),
    "wheel_folder": {"wheels": wheels, "bytes": size, "mib": round(size / 2**20, 1)},
    "run_rc": rc,
    "run_seconds": seconds,
    "ok": rc == 0,
    "dry_run": {k: report.get(k) for k in ("device", "versions", "wheel_install", "ok", "failed")}
    | {"steps": {n: s["status"] for n, s in report.get("steps", {}).items()}},
    "failures": {n: s.get("log_tail", "")[-2000:] for n, s in report.get("steps", {}).items() if s["status"] in ("failed", "timeout")},
}
(RESULTS / "gpu_wheels_check.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps({k: result[k] for k in ("ok", "run_seconds")} | {"steps": result["dry_run"]["steps"]}))
PY
exit $rc
