"""Inference throughput: continuous batching vs HF `generate` one request at a time.

Same model (the default, loaded in the one precision named on the command line: weights in
that dtype on every side), same prompts (32 distinct chat prompts: arithmetic questions and
short instructions), same greedy decoding, same token limit, eos stops, same torch threads.
All sides run in this one process, one after the other, after a warm-up each.

  * hf_generate_one_at_a_time: for each request, `model.generate(do_sample=False)` alone
    (HF's own dynamic KV cache). Its tokens/s does not depend on concurrency (requests wait
    in line), so it is measured once over all 32 requests.
  * batching_engine at 1, 8 and 32 concurrent requests: all 32 prompts go to `BatchingEngine`
    through its serving API (`start` / `submit`) with c requests in flight (each completion
    submits the next prompt), and the clock runs until the last completes; time to first
    token and per-request latency (from each request's submission) are recorded.
  * hf_engine (the static-batch `HFEngine`, finished rows dropped, none joining), all 32
    prompts in batches of 8 and of 32: what continuous batching adds over batching alone.

  * hf_generate_batched at each level c > 1: HF `generate` itself on left-padded batches of c
    prompts -- the fair peer for c streams (HF's static batch: finished rows decode padding).
  * llama.cpp on the Q8_0 GGUF of the same weights, the same 32 requests one at a time and all
    at once over 32 sequences of one context (what its server's 32 parallel slots decode, in one
    batch, without the HTTP), each at 1 thread and at the torch threads, the faster kept
    (bench/_shared/llama_cpp.py: llama-cpp-python, else node-llama-cpp's prebuilt binaries).

Every side generates for the same 32 requests, so the tokens/s compare like for like.

  * `--cuda-graphs auto,on,off` (a list): the batching engine runs each level once per setting
    (`engine.cuda_graphs`: decode steps captured as CUDA graphs in batch-size buckets), each
    engine built by `build_engine`; before the clock, one warm-up pass per bucket up to the top
    level captures its graph. `cuda_graphs` in the result: per setting, tokens/s per level, the
    graphs captured and decode steps per bucket, or why it did not run (`on` off a GPU: "not
    available on cpu"); `cuda_graphs_speedup_on_vs_off` per level where both ran. The first
    setting that ran is `runs.batching_engine`, which the ratios use.

    python bench/throughput/inference.py [--max-new-tokens 64] [--precision bf16] [--quantize int8 --out FILE]
        [--model DIR] [--levels 1,32,256] [--hf-requests 16] [--level-requests 8] [--cuda-graphs on,off]

On a GPU every side runs on it. With more requests in flight than the 32 prompts, the prompts
repeat (each request still decodes on its own). `--hf-requests N` times HF `generate` one at a
time over the first N requests only (its tokens/s does not depend on how many wait);
`--level-requests N` runs max(c, N) requests at level c (the GPU check: one stream decodes there
at about 30 tokens/s, so all 256 requests one at a time would take minutes).

Writes bench/results/inference.json (or --out) and prints a summary. With --quantize int8
every side runs the weight-only int8 copy (bench/results/inference_int8.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.llama_cpp import fastest, llama_cpp_peer  # noqa: E402
from _shared.paths import RESULTS, cpu_name  # noqa: E402

MODEL = "smollm2-135m-instruct"
QUESTIONS = [
    f"What is {a} + {b}? Answer with the number."
    for a, b in [(12, 7), (45, 38), (101, 99), (7, 8), (230, 470), (66, 34), (19, 23), (512, 256)]
] + [
    "Name three colours.",
    "Say hello in French.",
    "What is the capital of Italy?",
    "Write a haiku about rain.",
    "Explain what a CPU is in one sentence.",
    "List two prime numbers.",
    "What day comes after Monday?",
    "Give a synonym for happy.",
    "How many legs does a spider have?",
    "What is water made of?",
    "Describe the moon briefly.",
    "Write one sentence about cats.",
    "What is 9 times 6?",
    "Spell the word 'house' backwards.",
    "What language is spoken in Brazil?",
    "Name a fruit that is yellow.",
    "What is the opposite of cold?",
    "Tell me a fun fact about the ocean.",
    "What is the boiling point of water?",
    "Who wrote Romeo and Juliet?",
    "Suggest a name for a dog.",
    "What is the square root of 81?",
    "Translate 'thank you' into Spanish.",
    "Why is the sky blue? One sentence.",
]


def hf_one_at_a_time(model, prompts, max_new_tokens: int, eos: int, pad: int) -> dict:
    import torch

    tokens = 0
    t0 = time.perf_counter()
    for p in prompts:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([p], device=model.device),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        tokens += out.shape[1] - len(p)
    seconds = time.perf_counter() - t0
    return {"requests": len(prompts), "seconds": seconds, "generated_tokens": tokens, "tokens_per_s": tokens / seconds}


def batching_concurrent(engine, prompts, params, concurrency: int) -> dict:
    """All prompts through the serving thread with `concurrency` requests in flight (a closed
    loop: each completion submits the next prompt); wall clock to the last completion."""
    from concurrent.futures import FIRST_COMPLETED, wait

    first: dict[int, float] = {}
    done: dict[int, float] = {}
    submitted: dict[int, float] = {}
    results: dict[int, list] = {}
    engine.start()
    try:
        t0 = time.perf_counter()
        pending, queue = {}, list(enumerate(prompts))
        while queue or pending:
            while queue and len(pending) < concurrency:
                i, p = queue.pop(0)
                submitted[i] = time.perf_counter()
                fut = engine.submit(p, params, on_token=lambda j, t, lp, i=i: first.setdefault(i, time.perf_counter()))
                fut.add_done_callback(lambda f, i=i: done.setdefault(i, time.perf_counter()))
                pending[fut] = i
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                results[pending.pop(fut)] = fut.result()
        seconds = time.perf_counter() - t0
    finally:
        engine.stop()
    tokens = sum(len(r[0].token_ids) for r in results.values())
    return {
        "requests": len(prompts),
        "concurrency": concurrency,
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "mean_time_to_first_token_s": sum(first[i] - submitted[i] for i in first) / len(first),
        "mean_latency_s": sum(done[i] - submitted[i] for i in done) / len(done),
        "completions": [results[i][0].token_ids for i in sorted(results)],
    }


def hf_engine_batch(engine, prompts, params, batch: int) -> dict:
    """All prompts through the static-batch engine, `batch` prompts per call."""
    t0 = time.perf_counter()
    tokens = 0
    for start in range(0, len(prompts), batch):
        tokens += sum(len(g[0].token_ids) for g in engine.generate(prompts[start : start + batch], params))
    seconds = time.perf_counter() - t0
    return {
        "requests": len(prompts),
        "batch": batch,
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def hf_generate_batched(model, prompts, max_new_tokens: int, eos: int, pad: int, batch: int) -> dict:
    """All prompts through HF `generate`, `batch` left-padded prompts per call (HF's own static
    batch: finished rows keep decoding padding until the longest is done); a row's tokens count
    up to its first eos, as the other sides count them."""
    import torch

    tokens = 0
    t0 = time.perf_counter()
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=model.device)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        for row in out[:, width:].tolist():
            tokens += row.index(eos) + 1 if eos in row else len(row)
    seconds = time.perf_counter() - t0
    return {
        "requests": len(prompts),
        "batch": batch,
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def warm_decode_buckets(engine, prompts, levels: list[int]) -> None:
    """Capture every decode bucket up to the top level before the clock runs: through the serving
    API (whose fixed-shape cache the timed runs reuse), one burst of requests per bucket size,
    largest first, each decoding two tokens (the same warm-up for every setting)."""
    from tempering.config import SamplingParams
    from tempering.rollout.graphs import decode_buckets

    two = SamplingParams(temperature=0, max_new_tokens=3)
    engine.start()
    try:
        for size in reversed([b for b in decode_buckets(engine.max_slots) if b <= max(levels)]):
            for done in [engine.submit(p, two) for p in prompts[:size]]:
                done.result()
    finally:
        engine.stop()


def cuda_graph_engines(settings: list[str], model, tokenizer, precision: str, max_slots: int) -> tuple[dict, dict]:
    """({setting: engine} for the settings this host runs, {setting: report}); `on` off a GPU is
    recorded as not available, with the engine's own one-line reason."""
    from tempering.config import EngineSettings
    from tempering.errors import UserError
    from tempering.rollout.select import build_engine

    engines, report = {}, {}
    for setting in settings:
        engine_settings = EngineSettings(kind="batching", max_slots=max_slots, cuda_graphs=setting)
        try:
            engines[setting] = build_engine(engine_settings, model, tokenizer, precision, max_len=512)
            report[setting] = {"ran": True, "levels": {}}
        except UserError as exc:
            device = next(model.parameters()).device.type
            report[setting] = {"ran": False, "reason": f"not available on {device}: {exc}"}
    return engines, report


def fastest_llama_cpp(prompts, max_new_tokens: int, sequences: int, threads: list[int]) -> dict:
    """llama.cpp at each thread count; the fastest, with every count's tokens/s."""
    best = fastest({t: llama_cpp_peer(prompts, max_new_tokens, t, sequences=sequences) for t in threads})
    best.pop("answers", None)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--levels", default="1,8,32")
    p.add_argument(
        "--quantize",
        choices=["none", "int8"],
        default="none",
        help="int8: every side runs the weight-only int8 copy (models/quantize.py)",
    )
    p.add_argument("--model", default=MODEL, help="alias or model directory")
    p.add_argument("--hf-requests", type=int, default=None, help="time HF generate over the first N requests")
    p.add_argument(
        "--level-requests",
        type=int,
        default=None,
        help="each level c runs max(c, N) requests (default: all of them at every level)",
    )
    p.add_argument(
        "--cuda-graphs",
        default="auto",
        help="comma-separated engine.cuda_graphs settings (auto, on, off): the batching engine runs once per setting",
    )
    p.add_argument("--out", type=Path, default=RESULTS / "inference.json")
    args = p.parse_args()
    graph_settings = args.cuda_graphs.split(",")
    if not graph_settings or any(g not in ("auto", "on", "off") for g in graph_settings):
        p.error(f"--cuda-graphs {args.cuda_graphs!r}: a comma-separated list of auto, on, off")

    import torch

    torch.manual_seed(0)
    from tempering.config import SamplingParams
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.engine import HFEngine

    dtype = {"bf16": "bfloat16", "fp32": "float32"}[args.precision]
    model, tokenizer = load_model(args.model, dtype=dtype), load_tokenizer(args.model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    if args.quantize == "int8":
        from tempering.models.quantize import quantize_int8

        model = quantize_int8(model)
    levels = [int(x) for x in args.levels.split(",")]
    engines, graphs = cuda_graph_engines(graph_settings, model, tokenizer, args.precision, max(levels))
    if not engines:
        raise SystemExit(f"no --cuda-graphs setting runs here: {graphs}")
    batching = next(iter(engines.values()))  # the first setting that runs: runs.batching_engine
    static = HFEngine(model, tokenizer, precision=args.precision)
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(max(levels))]
    prompts = [batching.chat_prompt([{"role": "user", "content": q}]) for q in questions]
    greedy = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id

    # warm-up of every side
    hf_one_at_a_time(model, prompts[:1], 4, eos, pad)
    for engine in engines.values():
        engine.generate(prompts[:2], greedy.model_copy(update={"max_new_tokens": 4}))
        warm_decode_buckets(engine, prompts, levels)
    captured = {setting: engine.graph_captures for setting, engine in engines.items()}
    static.generate(prompts[:2], greedy.model_copy(update={"max_new_tokens": 4}))

    load_before = os.getloadavg()
    print(f"HF generate, {len(prompts[: args.hf_requests])} requests one at a time ...", flush=True)
    hf = hf_one_at_a_time(model, prompts[: args.hf_requests], args.max_new_tokens, eos, pad)
    print(f"  {hf['tokens_per_s']:.1f} tokens/s", flush=True)
    runs: dict = {
        "hf_generate_one_at_a_time": hf,
        "batching_engine": {},
        "hf_engine_static_batch": {},
        "hf_generate_batched": {},
    }
    top = str(max(levels))
    for c in levels:
        level_prompts = prompts[: max(c, args.level_requests)] if args.level_requests else prompts
        for setting, engine in engines.items():
            r = batching_concurrent(engine, level_prompts, greedy, c)
            graphs[setting]["levels"][str(c)] = {k: v for k, v in r.items() if k != "completions"}
            print(
                f"batching engine (cuda_graphs {setting}), {c} concurrent: {r['tokens_per_s']:.1f} tokens/s "
                f"(TTFT {r['mean_time_to_first_token_s']:.2f}s)",
                flush=True,
            )
        r = graphs[next(iter(engines))]["levels"][str(c)]
        runs["batching_engine"][str(c)] = r
        if c > 1:
            s = hf_engine_batch(static, level_prompts, greedy, c)
            runs["hf_engine_static_batch"][str(c)] = s
            print(f"HFEngine static batch, {c}: {s['tokens_per_s']:.1f} tokens/s", flush=True)
            g = hf_generate_batched(model, level_prompts, args.max_new_tokens, eos, pad, c)
            runs["hf_generate_batched"][str(c)] = g
            print(f"HF generate, batches of {c}: {g['tokens_per_s']:.1f} tokens/s", flush=True)
    llama_threads = sorted({1, torch.get_num_threads()})
    runs["llama_cpp_q8_0_one_at_a_time"] = fastest_llama_cpp(prompts, args.max_new_tokens, 1, llama_threads)
    runs[f"llama_cpp_q8_0_{top}_sequences"] = fastest_llama_cpp(prompts, args.max_new_tokens, int(top), llama_threads)
    for name in ("llama_cpp_q8_0_one_at_a_time", f"llama_cpp_q8_0_{top}_sequences"):
        print(f"{name}: {runs[name].get('tokens_per_s_by_threads') or runs[name]['reason']}", flush=True)
    llama_top = runs[f"llama_cpp_q8_0_{top}_sequences"]
    for setting, engine in engines.items():
        graphs[setting].update(
            tokens_per_s={c: r["tokens_per_s"] for c, r in graphs[setting]["levels"].items()},
            graph_captures=engine.graph_captures,
            graph_captures_while_timed=engine.graph_captures - captured[setting],
            graph_steps_by_bucket=engine.graph_steps,
        )
    both = all(graphs.get(s, {}).get("ran") for s in ("on", "off"))
    result = {
        "benchmark": "inference",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": args.model,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "precision": args.precision,
        "precision_note": f"weights loaded in {dtype} on every side; greedy decoding",
        "quantize": args.quantize,
        "workload": {
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "decoding": "greedy, eos stops",
            "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        },
        "torch_threads": torch.get_num_threads(),
        "machine_note": "2 cores; run alone under /work/bench.lock (the load average is recorded)",
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        f"ratio_{top}_concurrent_vs_hf_generate": runs["batching_engine"][top]["tokens_per_s"] / hf["tokens_per_s"],
        "ratios_vs_hf_generate": {
            c: r["tokens_per_s"] / hf["tokens_per_s"] for c, r in runs["batching_engine"].items()
        },
        "ratios_vs_hf_engine_static_batch": {
            c: runs["batching_engine"][c]["tokens_per_s"] / r["tokens_per_s"]
            for c, r in runs["hf_engine_static_batch"].items()
        },
        "target_ratio_32": 5.0,
        f"ratio_{top}_concurrent_vs_hf_generate_batched": (
            runs["batching_engine"][top]["tokens_per_s"] / runs["hf_generate_batched"][top]["tokens_per_s"]
            if top in runs["hf_generate_batched"]
            else None
        ),
        f"ratio_{top}_concurrent_vs_llama_cpp_q8_0_{top}_sequences": (
            runs["batching_engine"][top]["tokens_per_s"] / llama_top["tokens_per_s"] if llama_top["ran"] else None
        ),
        "ratios_vs_hf_generate_batched": {
            c: runs["batching_engine"][c]["tokens_per_s"] / r["tokens_per_s"]
            for c, r in runs["hf_generate_batched"].items()
        },
        "ratios_vs_llama_cpp_q8_0_one_at_a_time": (
            {
                c: r["tokens_per_s"] / runs["llama_cpp_q8_0_one_at_a_time"]["tokens_per_s"]
                for c, r in runs["batching_engine"].items()
            }
            if runs["llama_cpp_q8_0_one_at_a_time"]["ran"]
            else None
        ),
        "cuda_graphs": graphs,
        "cuda_graphs_speedup_on_vs_off": (
            {
                c: graphs["on"]["tokens_per_s"][c] / graphs["off"]["tokens_per_s"][c]
                for c in graphs["on"]["tokens_per_s"]
            }
            if both
            else None
        ),
        "runs": runs,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args.out.exists():  # single_stream.py's figures live in this file too: keep them
        before = json.loads(args.out.read_text())
        result.update({k: v for k, v in before.items() if k.startswith("single_stream_")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\n{top} concurrent vs HF generate one at a time: "
        f"{result[f'ratio_{top}_concurrent_vs_hf_generate']:.2f}x (target 5x) -> {args.out}"
    )


if __name__ == "__main__":
    main()
