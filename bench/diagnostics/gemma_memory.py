"""Peak memory of one LoRA SFT step of the built-in `gemma-3-270m`, through `temper sft`.

The model is resolved (converted once) first, so the measured run only loads it. Then `temper sft`
runs in a child process: LoRA (Tempering's defaults: r 16 on every Linear of the decoder blocks),
one step, batch 1, chats of the built-in arithmetic data rendered in Gemma's turn format
(`--max-length` tokens at most), the precision `auto` picks. Peak RSS is the child's own
(`ru_maxrss` from `os.wait4`): the process as a user runs it, with the import of torch and
transformers, the 262k-row embedding and the step. The baseline (`load_only`) is a child that
imports the same, loads the model with the same LoRA and reads every weight once (safetensors
are mapped lazily: an unread weight is not resident), and stops there.

    python bench/diagnostics/gemma_memory.py [--max-length 128]

Writes bench/results/gemma_memory.json and prints it; docs/models.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

MODEL = "gemma-3-270m"


def peak_of(cmd: list[str]) -> tuple[float, str]:
    """Run `cmd` in a child; its peak RSS (GB) and stdout."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[1:3]} exited {os.waitstatus_to_exitcode(status)}: {out[-500:]}")
    return usage.ru_maxrss / 1024**2, out


def sft_step(work: Path, max_length: int) -> dict:
    """One LoRA step of `temper sft` in a child: its peak RSS and summary."""
    import yaml

    from tempering.data.builtin import arithmetic_conversations

    rows = work / "train.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(16, 1)))
    cfg = {
        "model": MODEL,
        "data": {"train": str(rows), "max_length": max_length},
        "train": {"steps": 1, "batch_size": 1},
        "out": str(work / "runs"),
    }
    (work / "sft.yaml").write_text(yaml.safe_dump(cfg))
    peak, out = peak_of([sys.executable, "-m", "tempering.cli", "sft", str(work / "sft.yaml"), "--name", "mem"])
    return {"peak_rss_gb": peak, "summary": json.loads(out[out.index("{") :])}


LOAD_ONLY = (
    "from tempering.config import LoraSettings; from tempering.models.lora import load_for_training; "
    f"m = load_for_training({MODEL!r}, LoraSettings()); "
    "print(sum(float(p.detach().sum()) for p in m.parameters()))"  # safetensors map lazily: read every weight
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-length", type=int, default=128, help="the longest chat, in tokens")
    args = p.parse_args()
    from tempering.models.load import resolve_model
    from tempering.models.precision import resolve_precision

    resolve_model(MODEL)  # converted before the measured runs
    with tempfile.TemporaryDirectory() as tmp:
        step = sft_step(Path(tmp), args.max_length)
    load_only, _ = peak_of([sys.executable, "-c", LOAD_ONLY])
    result = {
        "model": MODEL,
        "cpu": cpu_name(),
        "max_length": args.max_length,
        "precision": resolve_precision("auto"),
        "lora_sft_step_peak_rss_gb": step["peak_rss_gb"],
        "load_only_peak_rss_gb": load_only,
        "step_over_load_gb": step["peak_rss_gb"] - load_only,
        "summary": step["summary"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gemma_memory.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
