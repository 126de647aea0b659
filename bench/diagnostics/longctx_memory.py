"""Memory at long context: one LoRA SFT step of the default model on one 8,192-token sequence,
with chunked log-probs + activation checkpointing vs without.

Each variant runs in its own child process, one after the other: the child loads SmolLM2-135M
with LoRA (r 16, all linear layers), builds one SFT micro-batch of a single `--length`-token
sequence (random tokens, loss on the second half: 4,096 scored tokens at 8k), and runs one step
(forward, backward, AdamW) in the precision `auto` picks.

  without   the whole (scored tokens x vocabulary) logits at once, no activation checkpointing
  with      `LOGPROB_CHUNK_TOKENS` scored positions per LM-head chunk (models/logprobs.py) and
            `train.gradient_checkpointing` (models/checkpointing.py), with the fixed mmap threshold
            the Trainer sets alongside it (models/allocator.py)
  with_heap the same with glibc's default allocator (what `with` was before the threshold)
  without_mapped  `without` with the fixed threshold: what chunking and checkpointing save on
            their own, the allocator the same on both sides

Peak RSS is each child's own (`ru_maxrss` from `os.wait4`); a `load_only` child gives the
baseline that "activation peak" subtracts. The parent watches the machine's available memory and
stops a child that would push it under `--floor-gb` (the machine is shared): such a run is
recorded as `stopped_at_gb`, a lower bound, never as a peak.

    flock /work/bench.lock python bench/diagnostics/longctx_memory.py [--length 8192]

Writes bench/results/longctx_memory.json (`memory_ratio_8k` = without / with, `peak_rss_gb_8k` = with)
and prints a table.
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

MODES = ("load_only", "with", "with_heap", "without", "without_mapped")


def child(mode: str, length: int, out: str) -> None:
    import random

    import torch

    from tempering.batches import model_inputs
    from tempering.config import LoraSettings
    from tempering.data.batches import SFTBatches
    from tempering.data.render import IGNORE, RenderedExample
    from tempering.models.allocator import map_large_blocks
    from tempering.models.checkpointing import enable_checkpointing
    from tempering.models.logprobs import LOGPROB_CHUNK_TOKENS
    from tempering.models.lora import load_for_training
    from tempering.models.precision import autocast, resolve_precision
    from tempering.objectives.sft import count_targets, masked_nll_sum

    model = load_for_training("smollm2-135m-instruct", LoraSettings())
    rng = random.Random(0)
    ids = [rng.randrange(3, model.config.vocab_size) for _ in range(length)]
    example = RenderedExample(ids, [IGNORE] * (length // 2) + ids[length // 2 :])
    batch = SFTBatches([example], 1, length, 0, False, seed=0).next_batch()
    precision = resolve_precision("auto")
    result: dict = {"precision": precision, "torch_threads": torch.get_num_threads()}
    if mode != "load_only":
        saving = mode.startswith("with_") or mode == "with"
        if saving:
            enable_checkpointing(model)
        if mode in ("with", "without_mapped"):
            map_large_blocks()
        chunk = LOGPROB_CHUNK_TOKENS if saving else None
        model.train()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        t0 = time.perf_counter()
        with autocast(precision, torch.device("cpu")):  # SFTObjective.loss, with the chunk size named
            hidden = model.get_decoder()(**model_inputs(batch), use_cache=False).last_hidden_state
            loss, _ = masked_nll_sum(
                hidden, model.get_output_embeddings(), batch["labels"], chunk_tokens=chunk, recompute=saving
            )
        units = count_targets(batch)
        (loss / units).backward()
        optimizer.step()
        result |= {"loss": float(loss.detach()) / units, "step_s": time.perf_counter() - t0, "chunk_tokens": chunk}
        result["scored_tokens"] = units
    Path(out).write_text(json.dumps(result))


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def run_child(mode: str, length: int, floor_gb: float) -> dict:
    """One child; its result with its own peak RSS, or where it was stopped to spare the machine."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", mode, "--out", out.name, f"--length={length}"]
        print(f"running {mode} ...", flush=True)
        proc = subprocess.Popen(cmd)
        stopped_at, started, shown = None, time.time(), 0
        while True:  # wait4, not poll(): poll would reap the child and lose its rusage
            pid_done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid_done:
                break
            if stopped_at is None and available_gb() < floor_gb:
                stopped_at = rss_gb(proc.pid)
                proc.kill()
            time.sleep(0.5)
            if time.time() - started > shown + 30:
                shown += 30
                print(f"  {mode}: {shown} s, rss {rss_gb(proc.pid):.2f} GB", flush=True)
        if stopped_at is not None:
            return {"stopped_at_gb": stopped_at, "floor_gb": floor_gb, "peak_rss_mb": usage.ru_maxrss / 1024}
        if os.waitstatus_to_exitcode(status) != 0:
            raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), cmd)
        result = json.loads(Path(out.name).read_text())
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    result["wall_s"] = time.time() - started
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=8192, help="tokens in the one training sequence")
    p.add_argument("--floor-gb", type=float, default=2.5, help="stop a child that leaves less available")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.length, args.out)
    load_before = os.getloadavg()
    runs = {mode: run_child(mode, args.length, args.floor_gb) for mode in MODES}
    base = runs["load_only"]["peak_rss_mb"]
    for mode in MODES[1:]:
        runs[mode]["activation_peak_mb"] = runs[mode]["peak_rss_mb"] - base
    with_gb, without_gb = runs["with"]["peak_rss_mb"] / 1024, runs["without"]["peak_rss_mb"] / 1024
    result = {
        "benchmark": "longctx_memory",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": "smollm2-135m-instruct, LoRA r16 all-linear, one SFT step, loss on the second half",
        "sequence_tokens": args.length,
        "cpu": cpu_name(),
        "load_average_at_start": load_before,
        "load_average_at_end": os.getloadavg(),
        "note": "the machine is shared: other helpers' work ran beside this; memory figures are the child's own",
        "runs": runs,
        "peak_rss_gb_8k": with_gb,
        "memory_ratio_8k": without_gb / with_gb,
        "activation_ratio_8k": runs["without"]["activation_peak_mb"] / runs["with"]["activation_peak_mb"],
        "without_is_lower_bound": "stopped_at_gb" in runs["without"],
        "memory_ratio_8k_same_allocator": runs["without_mapped"]["peak_rss_mb"] / runs["with"]["peak_rss_mb"],
        "memory_ratio_8k_glibc_default": without_gb / (runs["with_heap"]["peak_rss_mb"] / 1024),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "longctx_memory.json").write_text(json.dumps(result, indent=1))
    print(f"{'variant':<15} {'peak RSS GB':>12} {'activations GB':>15} {'step s':>8}")
    print(f"{'load only':<15} {base / 1024:>12.2f}")
    for mode in MODES[1:]:
        r = runs[mode]
        print(
            f"{mode:<15} {r['peak_rss_mb'] / 1024:>12.2f} {r['activation_peak_mb'] / 1024:>15.2f} {r.get('step_s', 0):>8.0f}"
        )
    print(f"memory ratio without / with: {result['memory_ratio_8k']:.2f}")


if __name__ == "__main__":
    main()
