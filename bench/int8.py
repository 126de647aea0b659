"""int8 on the default model: decode tokens/s at batch 1, memory, and quality through the gate.

    python bench/int8.py timing    # under the bench lock: tokens/s and memory of each variant
    python bench/int8.py quality   # nice 19: gate suites (arithmetic, HumanEval subset) with CIs

Variants (`tempering.models.quantize.quantize_int8`, torch.ao dynamic int8, per-channel
weights): every Linear int8 ("int8"), or the LM head kept in bf16 / fp32. Peers for the
library choice: torchao int8 weight-only (`Int8WeightOnlyConfig`). Baselines: the host's
default precision (bf16 autocast, native here) and fp32.

Timing workload: 12 arithmetic held-out chat prompts, one at a time, greedy, max_new_tokens
64, after a warm-up call (tokens/s = generated tokens / wall seconds).
Quality: the arithmetic suite (first --arith-limit tasks, 4 samples at T=0.7) and HumanEval
(first --humaneval-limit problems, 2 samples at T=0.8, 384 tokens), canonical template only,
on the --references (default fp32) and the int8 variant; the gate rule "no significant
regression on <suite>" (paired bootstrap CI of the difference) of int8 vs each reference.
Both modes update bench/results/int8.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "int8.json"
MODEL = "smollm2-135m-instruct"


def variants(base, names):
    """(label, model, engine precision) of each variant asked for."""
    import copy

    import torch

    from tempering.models.quantize import quantize_int8

    for name in names:
        if name in ("bf16", "fp32"):
            yield name, base, name
        elif name.startswith("int8"):
            head = name.split("-head-")[1] if "-head-" in name else "int8"
            yield name, quantize_int8(base, head), "fp32"
        elif name == "torchao-w8":
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            m = copy.deepcopy(base).to(torch.bfloat16)
            quantize_(m, Int8WeightOnlyConfig())
            yield name, m, "fp32"


def run_timing(args) -> dict:
    import torch

    from tempering.config import SamplingParams
    from tempering.data.builtin import arithmetic_tasks
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.quantize import state_bytes
    from tempering.rollout.engine import HFEngine

    torch.set_num_threads(args.threads)
    tokenizer, base = load_tokenizer(MODEL), load_model(MODEL).eval()
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    rows = {}
    for label, model, prec in variants(base, args.variants):
        engine = HFEngine(model, tokenizer, precision=prec)
        prompts = [engine.chat_prompt(t.chat()) for t in arithmetic_tasks(args.prompts, seed=0, split="heldout")]
        engine.generate(prompts[:1], params)
        tokens, t0 = 0, time.perf_counter()
        for p in prompts:
            tokens += len(engine.generate([p], params)[0][0].token_ids)
        seconds = time.perf_counter() - t0
        rows[label] = {"engine_precision": prec, "tokens": tokens, "seconds": round(seconds, 2),
                       "tokens_per_s": round(tokens / seconds, 2), "state_mb": round(state_bytes(model) / 2**20, 1)}
        print(label, rows[label], flush=True)
    out = {"timing": rows, "timing_workload": f"{args.prompts} arithmetic held-out chat prompts one at a time, "
           f"greedy, max_new_tokens {args.max_new_tokens}", "threads": args.threads}
    for name in rows:
        if name.startswith("int8"):
            out.setdefault("speedup_vs_bf16", {})[name] = round(rows[name]["tokens_per_s"] / rows["bf16"]["tokens_per_s"], 3)
            out.setdefault("speedup_vs_fp32", {})[name] = round(rows[name]["tokens_per_s"] / rows["fp32"]["tokens_per_s"], 3)
    chosen = args.chosen if args.chosen in rows else None
    if chosen:
        out["int8_variant"] = chosen
        out["int8_speedup_batch1"] = out["speedup_vs_fp32"][chosen]
        out["int8_speedup_batch1_vs_bf16"] = out["speedup_vs_bf16"][chosen]
    return out


def run_quality(args) -> dict:
    import torch

    from tempering.evals.gate import parse_rules, run_gate
    from tempering.evals.results import EvalResults
    from tempering.evals.runner import run_suite
    from tempering.evals.suite import load_suite
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.engine import HFEngine

    torch.set_num_threads(args.threads)
    tokenizer, base = load_tokenizer(MODEL), load_model(MODEL).eval()
    suites = [load_suite("arithmetic").with_overrides(limit=args.arith_limit),
              load_suite("humaneval").with_overrides(limit=args.humaneval_limit, samples=2)]
    suites = [s.model_copy(update={"templates": s.templates[:1]}) for s in suites]  # canonical template only
    results = {}
    for label, model, prec in variants(base, args.references + [args.chosen]):
        engine = HFEngine(model, tokenizer, precision=prec)
        t0 = time.perf_counter()
        out = [run_suite(s, engine, model_id=label, model_hash=f"int8-bench-{label}", log=print) for s in suites]
        results[label] = EvalResults(model=label, suites=out)
        print(label, [(s.suite, s.metrics[s.primary_metric]) for s in out], round(time.perf_counter() - t0), flush=True)
    rules = parse_rules([f"no significant regression on {s.name}" for s in suites])
    gates = {}
    for ref in args.references:
        g = run_gate(rules, results[ref], results[args.chosen])
        gates[f"{args.chosen}_vs_{ref}"] = g.to_dict()
    return {"quality": {k: v.model_dump(mode="json") for k, v in results.items()}, "gate": gates,
            "quality_suites": {"arithmetic_limit": args.arith_limit, "humaneval_limit": args.humaneval_limit,
                               "humaneval_samples": 2, "templates": "canonical only"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["timing", "quality"])
    parser.add_argument("--variants", nargs="+",
                        default=["bf16", "fp32", "int8", "int8-head-bf16", "int8-head-fp32", "torchao-w8"])
    parser.add_argument("--chosen", default="int8-head-fp32", help="the variant the gate judges")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--arith-limit", type=int, default=50)
    parser.add_argument("--humaneval-limit", type=int, default=8)
    parser.add_argument("--references", nargs="+", default=["fp32"], help="quality: baselines the gate compares with")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = run_timing(args) if args.mode == "timing" else run_quality(args)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    previous.update(result)
    previous.update({"benchmark": "int8", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": MODEL,
                     "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                     "host_default_precision": "bf16 (native: avx512_bf16)",
                     f"{args.mode}_load_average_before_after": [load_before, os.getloadavg()],
                     "note": "2 shared cores; timing ran alone under the bench lock while other agents' work ran "
                             "at nice 19; quality ran at nice 19"})
    OUT.write_text(json.dumps(previous, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
