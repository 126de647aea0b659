"""int8 on the default model: decode tokens/s at batch 1, memory, and quality through the gate.

    python bench/throughput/int8.py timing    # under the bench lock: tokens/s and memory of each variant
    python bench/throughput/int8.py quality   # nice 19: gate suites (arithmetic, HumanEval subset) with CIs
    python bench/throughput/int8.py fidelity  # nice 19: teacher-forced KL from fp32 and argmax agreement

Variants (`tempering.models.quantize.quantize_int8`, per-channel int8 weights): "int8-weight"
(weight-only: bf16 activations, `aten._weight_int8pack_mm`, the kernel torchao's CPU int8
weight-only path calls) and "int8-dynamic" (torch.ao dynamic: activations int8 too), each with
the LM head int8 or kept in bf16 / fp32 ("-head-bf16"). Baselines: bf16 weights (the fastest
float decoding here), fp32 weights under the bf16 engine ("bf16-autocast"), and fp32;
`int8_speedup_batch1` is against the fastest of them.

Timing workload: 12 open instructions (`TIMING_PROMPTS`: answers run to the token limit), one
at a time, greedy, max_new_tokens 64, after a warm-up call. Reported: end-to-end tokens/s and
decode tokens/s (prefill and first token timed apart); speedups are of decode tokens/s.
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
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

OUT = RESULTS / "int8.json"
MODEL = "smollm2-135m-instruct"


FLOATS = ("bf16", "bf16-autocast", "fp32")


def variants(base, names):
    """(label, model, engine precision) of each variant asked for.

    bf16: the model loaded with bf16 weights (the fastest float decoding here);
    bf16-autocast: fp32 weights under the bf16 engine (what a trainer's engine runs: its Linears
    answer from bf16 copies); fp32. int8 variants: `quantize_int8` of the fp32 model,
    "int8-<method>[-head-<precision>]" with method weight (weight-only, bf16 activations) or
    dynamic (torch.ao, activations int8 too)."""
    import copy

    import torch

    from tempering.models.quantize import quantize_int8

    for name in names:
        if name == "bf16":
            yield name, copy.deepcopy(base).to(torch.bfloat16), "bf16"
        elif name == "bf16-autocast":
            yield name, base, "bf16"
        elif name == "fp32":
            yield name, base, "fp32"
        elif name.startswith("int8-"):
            method, _, head = name.removeprefix("int8-").partition("-head-")
            yield name, quantize_int8(base, head or "int8", method=method), "fp32"
        else:
            raise SystemExit(f"unknown variant {name!r}")


TIMING_PROMPTS = [
    "Explain why the sky is blue.",
    "Write a short story about a lost key.",
    "Describe how a bicycle works.",
    "Give three tips for learning a new language.",
    "What is photosynthesis?",
    "Write a poem about the sea.",
    "Explain what a computer program is.",
    "Describe your ideal weekend.",
    "Why do cats purr?",
    "How do airplanes stay in the air?",
    "Write a letter to a friend about a trip.",
    "What makes a good teacher?",
]


def run_timing(args) -> dict:
    """Per variant: each prompt alone, timed twice: to its first token (prefill; max_new_tokens 1)
    and whole (greedy, --max-new-tokens). Decode tokens/s = tokens after the first / (whole - first)."""
    import torch

    from tempering.config import SamplingParams
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.quantize import state_bytes
    from tempering.rollout.engine import HFEngine

    torch.set_num_threads(args.threads)
    tokenizer, base = load_tokenizer(MODEL), load_model(MODEL).eval()
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    first = SamplingParams(temperature=0, max_new_tokens=1)
    rows = {}
    for label, model, prec in variants(base, args.variants):
        engine = HFEngine(model, tokenizer, precision=prec)
        prompts = [engine.chat_prompt([{"role": "user", "content": q}]) for q in TIMING_PROMPTS[: args.prompts]]
        engine.generate(prompts[:1], params)
        tokens, whole, to_first = 0, 0.0, 0.0
        for p in prompts:
            t0 = time.perf_counter()
            engine.generate([p], first)
            t1 = time.perf_counter()
            tokens += len(engine.generate([p], params)[0][0].token_ids)
            to_first, whole = to_first + t1 - t0, whole + time.perf_counter() - t1
        rows[label] = {
            "engine_precision": prec,
            "tokens": tokens,
            "seconds": round(whole, 2),
            "tokens_per_s": round(tokens / whole, 2),
            "prefill_s": round(to_first, 2),
            "decode_tokens_per_s": round((tokens - len(prompts)) / (whole - to_first), 2),
            "state_mb": round(state_bytes(model) / 2**20, 1),
        }
        print(label, rows[label], flush=True)
    out = {
        "timing": rows,
        "timing_workload": f"{len(prompts)} open instructions (chat), one at a time, greedy, "
        f"max_new_tokens {args.max_new_tokens}; decode = tokens after the first over (whole - time to the first)",
        "threads": args.threads,
    }
    floats = [f for f in FLOATS if f in rows]
    fastest = max(floats, key=lambda f: rows[f]["decode_tokens_per_s"]) if floats else None
    for name in rows:
        if name.startswith("int8"):
            for ref in floats:
                out.setdefault(f"speedup_vs_{ref}", {})[name] = round(
                    rows[name]["decode_tokens_per_s"] / rows[ref]["decode_tokens_per_s"], 3
                )
    chosen = args.chosen if args.chosen in rows else None
    if chosen and fastest:
        out["int8_variant"] = chosen
        out["fastest_float"] = fastest
        out["int8_speedup_batch1"] = out[f"speedup_vs_{fastest}"][chosen]
        if "fp32" in rows:
            out["int8_speedup_batch1_vs_fp32"] = out["speedup_vs_fp32"][chosen]
    return out


def run_fidelity(args) -> dict:
    """Teacher-forced distance from fp32: on fp32's own greedy answers to --prompts held-out
    arithmetic chat prompts, each variant's mean KL(fp32 || variant) per answer token and how
    often its argmax is fp32's. bf16 is the yardstick: the distance the host default already has."""
    import torch

    from tempering.config import SamplingParams
    from tempering.data.builtin import arithmetic_tasks
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import autocast
    from tempering.rollout.engine import HFEngine, bf16_linear_weights

    torch.set_num_threads(args.threads)
    tokenizer, base = load_tokenizer(MODEL), load_model(MODEL).eval()
    engine = HFEngine(base, tokenizer, precision="fp32")
    prompts = [engine.chat_prompt(t.chat()) for t in arithmetic_tasks(args.prompts, seed=1, split="heldout")]
    answers = [
        g[0].token_ids
        for g in engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens))
    ]

    @torch.no_grad()
    def logprobs(model, prec):
        out = []
        with bf16_linear_weights(model, prec), autocast(prec, torch.device("cpu")):
            for p, a in zip(prompts, answers):
                logits = model(input_ids=torch.tensor([p + a])).logits[0, len(p) - 1 : -1].float()
                out.append(torch.log_softmax(logits, -1))
        return torch.cat(out)

    ref = logprobs(base, "fp32")
    rows = {}
    for label, model, prec in variants(base, [v for v in args.variants if v != "fp32"]):
        lp = logprobs(model, prec)
        kl = (ref.exp() * (ref - lp)).sum(-1)
        rows[label] = {
            "mean_kl_per_token": round(kl.mean().item(), 5),
            "max_kl": round(kl.max().item(), 4),
            "argmax_agreement": round((lp.argmax(-1) == ref.argmax(-1)).float().mean().item(), 4),
        }
        print(label, rows[label], flush=True)
    return {
        "fidelity": rows,
        "fidelity_workload": f"fp32 greedy answers (<= {args.max_new_tokens} tokens) to {len(prompts)} "
        f"held-out arithmetic chat prompts, {ref.shape[0]} answer tokens, teacher-forced",
    }


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
    suites = [
        load_suite("arithmetic").with_overrides(limit=args.arith_limit),
        load_suite("humaneval").with_overrides(limit=args.humaneval_limit, samples=2),
    ]
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
    return {
        "quality": {k: v.model_dump(mode="json") for k, v in results.items()},
        "gate": gates,
        "quality_suites": {
            "arithmetic_limit": args.arith_limit,
            "humaneval_limit": args.humaneval_limit,
            "humaneval_samples": 2,
            "templates": "canonical only",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["timing", "quality", "fidelity"])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[
            "bf16",
            "bf16-autocast",
            "fp32",
            "int8-weight",
            "int8-weight-head-bf16",
            "int8-dynamic",
            "int8-dynamic-head-fp32",
        ],
    )
    parser.add_argument("--chosen", default="int8-weight", help="the variant the gate judges")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--arith-limit", type=int, default=50)
    parser.add_argument("--humaneval-limit", type=int, default=8)
    parser.add_argument("--references", nargs="+", default=["fp32"], help="quality: baselines the gate compares with")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = {"timing": run_timing, "quality": run_quality, "fidelity": run_fidelity}[args.mode](args)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    previous.update(result)
    previous.update(
        {
            "benchmark": "int8",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "model": MODEL,
            "cpu": cpu_name(),
            "cpu_count": os.cpu_count(),
            "host_default_precision": "bf16 (native: avx512_bf16)",
            f"{args.mode}_load_average_before_after": [load_before, os.getloadavg()],
            "note": "2 shared cores; timing ran alone under the bench lock while other agents' work ran "
            "at nice 19; quality ran at nice 19",
        }
    )
    OUT.write_text(json.dumps(previous, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
