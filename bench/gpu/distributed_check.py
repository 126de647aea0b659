"""`torchrun` on this machine's one device: `temper sft` under torchrun, then one collective.

With one GPU the world has one process, which takes the same code path as the CPU torchrun
tests (tests/train/test_distributed.py: `torchrun --standalone -m tempering.cli sft CFG`); a
world of one joins no process group (train/distributed.py), so a second torchrun process then
joins one on the backend Tempering picks (NCCL on a GPU, gloo on a CPU) and all-reduces a tensor
on the device. Two ranks on one GPU are refused by NCCL: the 2-process path needs 2 GPUs.

    python bench/gpu/distributed_check.py --model DIR --out FILE [--steps 4] [--budget 50]

The two torchruns share `--budget` seconds (bench/gpu/check.py passes the step's time box less a
margin): the collective keeps a third of it (at least 10 s: a process start, CUDA and a group
join), the SFT run the rest. A torchrun past its limit is recorded as such, not raised.
Writes FILE (JSON); exits non-zero when either part fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def torchrun(*argv: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *argv]


def sft_under_torchrun(model: str, steps: int, work: Path, timeout_s: float) -> dict:
    """`temper sft` on arithmetic conversations under torchrun; its step records."""
    import yaml

    from tempering.data.builtin import arithmetic_conversations

    train = work / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(64, 1)))
    cfg = {
        "model": model,
        "lora": None,
        "data": {"train": str(train), "max_length": 160},
        "train": {"steps": steps, "batch_size": 4, "precision": "auto", "checkpoint": {"every": steps}},
        "out": str(work / "runs"),
    }
    path = work / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = run_limited(torchrun("-m", "tempering.cli", "sft", str(path), "--name", "torchrun"), timeout_s)
    if proc is None:
        return {"ok": False, "timed_out_after_s": timeout_s}
    metrics = work / "runs" / "torchrun" / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    records = [r for r in map(json.loads, lines) if "event" not in r]
    losses = [r["loss"] for r in records]
    ok = proc.returncode == 0 and len(losses) == steps and all(math.isfinite(x) for x in losses)
    return {"ok": ok, "returncode": proc.returncode, "losses": losses, "stderr_tail": proc.stderr[-2000:]}


def run_limited(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    """`argv` with its output captured; None when it ran past `timeout_s` (it is killed)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def split_budget(budget_s: float) -> tuple[float, float]:
    """(the SFT run's limit, the collective's reserve) out of `budget_s` seconds."""
    reserve = max(10.0, budget_s / 3)
    return budget_s - reserve, reserve


def collective(timeout_s: float) -> dict:
    """One torchrun process joins a group and all-reduces on its device (the `--probe` side)."""
    proc = run_limited(torchrun(__file__, "--probe"), timeout_s)
    if proc is None:
        return {"ok": False, "timed_out_after_s": timeout_s}
    last = proc.stdout.strip().splitlines()[-1:] or ["{}"]
    try:
        found = json.loads(last[0])
    except json.JSONDecodeError:
        found = {}
    result = {"ok": proc.returncode == 0 and found.get("sum") == 1.0, "returncode": proc.returncode, **found}
    if proc.returncode:
        result["stderr_tail"] = proc.stderr[-2000:]
    return result


def probe() -> None:
    """Inside torchrun: join the group on Tempering's backend and all-reduce a one."""
    import torch
    import torch.distributed as dist

    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    t = torch.ones(1, device="cuda" if on_gpu else "cpu")
    dist.all_reduce(t)
    print(json.dumps({"backend": dist.get_backend(), "world_size": dist.get_world_size(), "sum": float(t.item())}))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="alias or model directory")
    p.add_argument("--out", type=Path)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--budget", type=float, default=240.0, help="seconds for both torchruns together")
    p.add_argument("--probe", action="store_true", help="internal: the process torchrun starts")
    args = p.parse_args()
    if args.probe:
        return probe()
    if not args.model or not args.out:
        p.error("--model and --out are required")
    start = time.perf_counter()
    sft_s, _ = split_budget(args.budget)
    with tempfile.TemporaryDirectory() as work:
        sft = sft_under_torchrun(args.model, args.steps, Path(work), sft_s)
    left = args.budget - (time.perf_counter() - start)  # the reserve, and whatever the SFT run left
    result = {"sft_under_torchrun": sft, "collective": collective(left)}
    result["budget_s"] = {"total": args.budget, "sft_limit": round(sft_s, 1), "collective_limit": round(left, 1)}
    args.out.write_text(json.dumps(result, indent=1))
    parts = {k: result[k]["ok"] for k in ("sft_under_torchrun", "collective")}
    print(json.dumps(parts))
    sys.exit(0 if all(parts.values()) else 1)


if __name__ == "__main__":
    main()
