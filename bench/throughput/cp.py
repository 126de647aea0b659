"""Context parallelism (`train.context_parallel: 2`): gradients and peak memory of 2 ranks against one process.

One SFT step's forward and backward (no optimizer) on one row of `--length` random tokens (loss on
the second half, fp32) over a random Llama of the given shape, measured twice, each side in fresh
processes started by this script: one process on the whole row (`SFTObjective` on the padded
batch, SDPA), and 2 gloo ranks under `torchrun` each holding its zigzag half of the row
(`train/context_parallel.py: split_sequences`, the path `temper sft` takes).

- Gradients: rank 0 writes its gradients after the sum over ranks (`all_reduce_grads`, as the
  Trainer does), the one process its own; the max abs difference over every parameter, and the
  loss (summed over ranks / target units) against the one process's.
- Memory: each process builds its model and batch, trims the heap (`malloc_trim`), resets the
  kernel's peak-RSS mark (/proc/self/clear_refs) and runs the step; its figure is the step's peak
  RSS (VmHWM) less its RSS just before (so the model, the interpreter and torch's libraries are
  not counted, and the parameter gradients the step allocates are). The ratio is the one
  process's figure over the larger of the two ranks'.

    nice -n 0 python bench/throughput/cp.py --length 8192 --hidden 512 --layers 4 --heads 8 --kv-heads 2
    python bench/throughput/cp.py --smoke --out /tmp/cp.json   # a tiny shape: keeps the script working

Writes bench/results/cp.json (or `--out`) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402
from _shared.proc import status_kb  # noqa: E402

SMOKE = {"length": 64, "hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 128}
GB = 1024**3


def _model(shape: dict):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["hidden"] * 8 // 3,
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=max(shape["length"], 512),
        pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model


def _batches(shape: dict):
    """A batch source of the one row (loss on its second half), whole on every process."""
    import random

    from tempering.data.batches import SFTBatches
    from tempering.data.render import IGNORE, RenderedExample

    n = shape["length"]
    rng = random.Random(0)
    ids = [rng.randrange(3, shape["vocab"]) for _ in range(n)]
    row = RenderedExample(ids, [IGNORE] * (n // 2) + ids[n // 2 :])
    return SFTBatches([row], 1, n, 0, False, seed=0)


def child(side: str, shape: dict, out: str) -> None:
    """One process's step: `side` is `one` (the whole row) or `cp` (a torchrun rank)."""
    import ctypes

    import torch

    from tempering.objectives.sft import SFTObjective
    from tempering.train import distributed

    torch.set_num_threads(1)  # the 2 ranks and the one process each get one core
    world = distributed.init()
    model, batches = _model(shape), _batches(shape)
    if side == "cp":
        from tempering.train.context_parallel import split_sequences

        batches = split_sequences(model, batches, world.size)
    batch = batches.next_batch()
    objective = SFTObjective()
    units = distributed.sum_over_ranks([objective.units(batch)])[0]
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before_kb = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak mark starts again from here
    t0 = time.perf_counter()
    loss_sum, _ = objective.loss(model, batch)
    (loss_sum / units).backward()
    distributed.all_reduce_grads(model.parameters())
    seconds = time.perf_counter() - t0
    peak_kb = status_kb("VmHWM")
    loss = distributed.sum_over_ranks([float(loss_sum.detach()) / units])[0]
    result = {
        "rank": world.rank,
        "tokens_held": int(batch["input_ids"].numel()),
        "loss": loss,
        "rss_before_step_gb": before_kb / 1024**2,
        "step_peak_over_before_gb": (peak_kb - before_kb) / 1024**2,
        "step_s": seconds,
        "grad_bytes": sum(p.numel() * 4 for p in model.parameters()),
    }
    Path(f"{out}.rank{world.rank}.json").write_text(json.dumps(result))
    if world.main:
        torch.save({n: p.grad for n, p in model.named_parameters()}, f"{out}.grads.pt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_side(side: str, shape: dict, work: Path) -> list[dict]:
    """Run one side in fresh processes; every process's result."""
    out = str(work / side)
    args = [__file__, "--child", side, "--shape", json.dumps(shape), "--out", out]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.update(OMP_NUM_THREADS="1")
    if side == "one":
        cmd = [sys.executable, *args]
    else:
        rdzv = f"--rdzv-endpoint=127.0.0.1:{_free_port()}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", rdzv, "--nproc_per_node", "2", *args]
    print(f"running {side} ...", flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return [json.loads(p.read_text()) for p in sorted(work.glob(f"{side}.rank*.json"))]


def host() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown",
    )
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": list(os.getloadavg())}


def measure(shape: dict) -> dict:
    import torch

    started = host()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one = run_side("one", shape, work)[0]
        ranks = run_side("cp", shape, work)
        g1, g2 = (torch.load(work / f"{side}.grads.pt") for side in ("one", "cp"))
    split_peak = max(r["step_peak_over_before_gb"] for r in ranks)
    return {
        "shape": {k: v for k, v in shape.items() if k != "length"},
        "length": shape["length"],
        "max_abs_grad_diff": max(float((g1[k] - g2[k]).abs().max()) for k in g1),
        "max_abs_grad": max(float(g.abs().max()) for g in g1.values()),
        "max_abs_loss_diff": abs(ranks[0]["loss"] - one["loss"]),
        "loss": one["loss"],
        "peak_mem_ratio_one_vs_two_ranks": one["step_peak_over_before_gb"] / split_peak,
        "one_process": one,
        "two_ranks": ranks,
        "method": (
            "one SFT forward+backward (no optimizer step), fp32, one row of `length` random tokens, loss on its "
            "second half; each side in fresh processes (one process; 2 gloo ranks under torchrun, zigzag halves of "
            "the row, K/V all-gathered per layer, gradients summed over ranks), 1 torch thread each. Memory per "
            "process: peak RSS (VmHWM, reset by /proc/self/clear_refs after malloc_trim) during the step less RSS "
            "just before it, so the model, interpreter and libraries are excluded and the step's activations, "
            "gathered K/V, logits chunks and parameter gradients are included; ratio = one process / the larger "
            "rank. Gradients: rank 0's after the sum over ranks vs the one process's, max abs over all parameters. "
            "step_s figures share the cores with other work and are no speed claim."
        ),
        "host": started,
        "load_average_after": list(os.getloadavg()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--smoke", action="store_true", help="a tiny shape (seconds): keeps the script working")
    ap.add_argument("--out", type=Path, default=RESULTS / "cp.json")
    ap.add_argument("--child", choices=["one", "cp"], help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, json.loads(args.shape), str(args.out))
        return
    shape = dict(SMOKE) if args.smoke else {
        "length": args.length,
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "vocab": args.vocab,
    }  # fmt: skip
    result = measure(shape)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("one_process", "two_ranks", "method")}, indent=2))


if __name__ == "__main__":
    main()
