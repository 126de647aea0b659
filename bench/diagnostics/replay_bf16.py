"""Measure the replay bound: the default model samples arithmetic replies with each in-process
engine kind, the trainer recomputes the sampled tokens' log-probs (`rollout.replay`), and the
gap |log p_train - log p_rollout| is reported per engine and precision (mean, p99, max, KL).

    python bench/diagnostics/replay_bf16.py            # -> bench/results/replay_bf16.json
    python bench/diagnostics/replay_bf16.py --runs bf16:hf bf16:batching --prompts 4 --tokens 24

fp32 is measured on the HF engine only (the control; every engine kind agrees in fp32 on the
tiny models of tests/rollout/test_replay.py). bf16 is measured with engine and trainer both in bf16 (the `precision: auto` case on a host with
native bf16). The largest bf16 `max` over engines is the documented bound
(`rollout.replay.BF16_EPSILON` rounds it up).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402


def main() -> None:
    import argparse

    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--runs", nargs="+", default=["fp32:hf", "bf16:hf", "bf16:batching", "bf16:speculative-lookup"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    args = p.parse_args()

    from tempering.config import EngineSettings, SamplingParams, TaskSourceSettings
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import cpu_has_native_bf16
    from tempering.rollout.replay import replay
    from tempering.rollout.select import build_engine
    from tempering.sources.tasks import load_tasks

    torch.manual_seed(0)
    model, tokenizer = load_model("smollm2-135m-instruct").eval(), load_tokenizer("smollm2-135m-instruct")
    tasks = load_tasks(TaskSourceSettings(n=args.prompts, split="heldout"))
    kinds = {
        "hf": EngineSettings(kind="hf"),
        "batching": EngineSettings(kind="batching"),
        "speculative-lookup": EngineSettings(kind="speculative", draft={}),
    }
    rows = []
    for precision, name in (run.split(":") for run in args.runs):
        t0 = time.perf_counter()
        engine = build_engine(kinds[name], model, tokenizer, precision)
        prompts = [engine.chat_prompt(t.chat()) for t in tasks]
        params = SamplingParams(n=args.samples, max_new_tokens=args.tokens, temperature=1.0, seed=0)
        figures = replay(engine, model, prompts, params, precision)
        rows.append({"precision": precision, "engine": name, **figures, "seconds": time.perf_counter() - t0})
        print(json.dumps(rows[-1]), flush=True)
    bf16 = [r for r in rows if r["precision"] == "bf16"]
    out = {
        "model": "smollm2-135m-instruct",
        "prompts": args.prompts,
        "samples": args.samples,
        "max_new_tokens": args.tokens,
        "temperature": 1.0,
        "rows": rows,
        "bf16_max": max(r["max"] for r in bf16),
        "bf16_p99": max(r["logprob_mismatch_p99"] for r in bf16),
        "fp32_max": max((r["max"] for r in rows if r["precision"] == "fp32"), default=None),
        "native_bf16": cpu_has_native_bf16(),
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "load_avg_1m": os.getloadavg()[0],
        "note": "other helpers' work ran beside this measurement (a shared 2-core host)",
    }
    (RESULTS / "replay_bf16.json").write_text(json.dumps(out, indent=1))
    print(f"bf16 max {out['bf16_max']:.3g} (p99 {out['bf16_p99']:.3g}); fp32 max {out['fp32_max']}")


if __name__ == "__main__":
    main()
