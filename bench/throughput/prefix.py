"""Prefix sharing in the batching engine: where prefilling a common opening once pays.

Same model (the default, weights in --precision), the 32 chat prompts of bench/throughput/inference.py,
greedy, all submitted at once to `BatchingEngine.generate` (32 slots), with sharing on (the
default: prompts admitted together prefill their common prefix once) and off
(`MIN_SHARED_PREFIX` set past every prompt's length), in this one process, after a warm-up
each, best of --repeats:

  * chat: each question under the chat template's default system prompt (a ~30-token
    common opening), --max-new-tokens answers;
  * few_shot: the same questions after 8 worked examples (a ~300-token common opening),
    --few-shot-tokens answers (an eval suite's shape).

    python bench/throughput/prefix.py [--precision bf16] [--max-new-tokens 64] [--few-shot-tokens 16]

Writes bench/results/prefix.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

MODEL = "smollm2-135m-instruct"
SHOTS = [
    ("What is 3 + 4?", "7"),
    ("What is 10 + 15?", "25"),
    ("Name a colour.", "Blue."),
    ("What is the capital of Spain?", "Madrid."),
    ("Say hi in Italian.", "Ciao."),
    ("What is 6 times 7?", "42"),
    ("Give an antonym of tall.", "Short."),
    ("How many days in a week?", "Seven."),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--few-shot-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()

    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # inference.py, for its prompts
    from inference import QUESTIONS

    import tempering.rollout.batching_engine as be
    from tempering.config import SamplingParams
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.batching_engine import BatchingEngine

    dtype = {"bf16": "bfloat16", "fp32": "float32"}[args.precision]
    model, tokenizer = load_model(MODEL, dtype=dtype).eval(), load_tokenizer(MODEL)
    engine = BatchingEngine(model, tokenizer, precision=args.precision, max_slots=len(QUESTIONS), max_len=1024)
    shots = [m for q, a in SHOTS for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
    workloads = {
        "chat": ([engine.chat_prompt([{"role": "user", "content": q}]) for q in QUESTIONS], args.max_new_tokens),
        "few_shot": (
            [engine.chat_prompt(shots + [{"role": "user", "content": q}]) for q in QUESTIONS],
            args.few_shot_tokens,
        ),
    }
    default_min = be.MIN_SHARED_PREFIX
    load_before = os.getloadavg()
    out = {}
    for name, (prompts, new_tokens) in workloads.items():
        params = SamplingParams(temperature=0, max_new_tokens=new_tokens)
        row = {
            "prompts": len(prompts),
            "common_prefix_tokens": be.shared_prefix(prompts),
            "mean_prompt_tokens": sum(map(len, prompts)) / len(prompts),
            "max_new_tokens": new_tokens,
        }
        answers = {}
        for side, minimum in (("shared", default_min), ("not_shared", 10**9)):
            be.MIN_SHARED_PREFIX = minimum
            engine.generate(prompts[:4], params)  # warm-up
            best = None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                got = engine.generate(prompts, params)
                seconds = time.perf_counter() - t0
                best = seconds if best is None else min(best, seconds)
            tokens = sum(len(g[0].token_ids) for g in got)
            answers[side] = [g[0].token_ids for g in got]
            row[side] = {"seconds": round(best, 3), "tokens": tokens, "tokens_per_s": round(tokens / best, 2)}
        be.MIN_SHARED_PREFIX = default_min
        row["speedup"] = round(row["not_shared"]["seconds"] / row["shared"]["seconds"], 3)
        row["same_greedy_tokens"] = sum(a == b for a, b in zip(answers["shared"], answers["not_shared"]))
        out[name] = row
        print(name, json.dumps(row), flush=True)
    result = {
        "benchmark": "prefix",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": MODEL,
        "precision": args.precision,
        "torch_threads": torch.get_num_threads(),
        "machine_note": (
            "2 shared cores: this bench held /work/bench.lock at normal nice while other "
            "agents' work ran alongside at nice 19"
        ),
        "load_average_before_after": [load_before, os.getloadavg()],
        "workloads": out,
    }
    (RESULTS / "prefix.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
