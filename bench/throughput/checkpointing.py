"""Activation checkpointing on the default model: one LoRA SFT step on a long sequence, off vs on.

Each setting runs in its own child process, one after the other: the child loads
SmolLM2-135M with LoRA (r 16, all linear layers), builds one SFT micro-batch of a single
`--length`-token sequence (random tokens, loss on the second half), runs `--warmup` steps,
then times `--steps` steps (forward, backward, AdamW). Peak RSS is the child's own
(`ru_maxrss` of the rusage `os.wait4` returns for it, as RUSAGE_CHILDREN would count it); a third
child only loads the model and the batch, so "activation peak" = a setting's peak minus that
baseline. The switch is the one `train.gradient_checkpointing` uses (`models/checkpointing.py`).

    python bench/throughput/checkpointing.py [--length 2048] [--steps 2] [--warmup 1]

Writes bench/results/gradient_checkpointing.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

MODES = ("load_only", "off", "on")


def child(mode: str, length: int, steps: int, warmup: int, out: str) -> None:
    import random

    import torch

    from tempering.config import LoraSettings
    from tempering.data.batches import SFTBatches
    from tempering.data.render import IGNORE, RenderedExample
    from tempering.models.checkpointing import enable_checkpointing
    from tempering.models.lora import load_for_training
    from tempering.models.precision import autocast, resolve_precision
    from tempering.objectives.sft import SFTObjective

    model = load_for_training("smollm2-135m-instruct", LoraSettings())
    rng = random.Random(0)
    ids = [rng.randrange(3, model.config.vocab_size) for _ in range(length)]
    example = RenderedExample(ids, [IGNORE] * (length // 2) + ids[length // 2 :])
    batch = SFTBatches([example], 1, length, 0, False, seed=0).next_batch()
    precision = resolve_precision("auto")
    result: dict = {"precision": precision, "torch_threads": torch.get_num_threads()}
    if mode != "load_only":
        if mode == "on":
            enable_checkpointing(model)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-5)
        objective, units = SFTObjective(), SFTObjective().units(batch)
        times = []
        for _ in range(warmup + steps):
            t0 = time.perf_counter()
            with autocast(precision, torch.device("cpu")):
                loss, _ = objective.loss(model, batch)
            (loss / units).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        timed = times[warmup:]
        result |= {
            "loss": float(loss.detach()) / units,
            "step_s": sum(timed) / len(timed),
            "tokens_per_s": length * len(timed) / sum(timed),
        }
    Path(out).write_text(json.dumps(result))


def run_child(mode: str, args: argparse.Namespace) -> dict:
    """One child process; returns its result with its own peak RSS (the child's rusage from wait4)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", mode, "--out", out.name]
        cmd += [f"--length={args.length}", f"--steps={args.steps}", f"--warmup={args.warmup}"]
        print(f"running {mode} ...", flush=True)
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        result = json.loads(Path(out.name).read_text())
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=2048, help="tokens in the one training sequence")
    p.add_argument("--steps", type=int, default=2, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.length, args.steps, args.warmup, args.out)
    runs = {mode: run_child(mode, args) for mode in MODES}
    base = runs["load_only"]["peak_rss_mb"]
    for mode in ("on", "off"):
        runs[mode]["activation_peak_mb"] = runs[mode]["peak_rss_mb"] - base
    result = {
        "benchmark": "gradient_checkpointing",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": "smollm2-135m-instruct, LoRA r16 all-linear",
        "sequence_tokens": args.length,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "cpu": cpu_name(),
        "load_average_at_end": os.getloadavg(),
        "runs": runs,
        "peak_rss_ratio_on_vs_off": runs["on"]["peak_rss_mb"] / runs["off"]["peak_rss_mb"],
        "activation_peak_ratio_on_vs_off": runs["on"]["activation_peak_mb"] / runs["off"]["activation_peak_mb"],
        "tokens_per_s_ratio_on_vs_off": runs["on"]["tokens_per_s"] / runs["off"]["tokens_per_s"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gradient_checkpointing.json").write_text(json.dumps(result, indent=1))
    print(f"{'setting':<10} {'peak RSS MB':>12} {'activations MB':>15} {'tokens/s':>9}")
    print(f"{'load only':<10} {base:>12.0f}")
    for mode in ("off", "on"):
        r = runs[mode]
        print(f"{mode:<10} {r['peak_rss_mb']:>12.0f} {r['activation_peak_mb']:>15.0f} {r['tokens_per_s']:>9.1f}")


if __name__ == "__main__":
    main()
