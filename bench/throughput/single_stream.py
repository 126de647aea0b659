"""Single-stream decode: one request at a time, the batching engine's single-stream step
(`models/llama_decode.py`) against the HF forward it replaces, and llama.cpp Q8_0.

Same model (the default), same 8 prompts asking for long answers, greedy, 128 new tokens at
most (eos stops), 2 torch threads, every side in this one process after a warm-up. Sides,
interleaved over `--rounds` rounds (so drift in the shared machine's load hits all alike):

  * hf_generate: HF `model.generate(do_sample=False)` per prompt (bf16 weights);
  * batching_hf_forward: `BatchingEngine.generate([prompt])` with the single-stream step off
    (the engine as it decoded a lone request before it had one);
  * single_stream_bf16: the same with the step on (bf16 weights, oneDNN-prepacked);
  * hf_generate_int8 / single_stream_int8: `quantize_int8` of the bf16 model (weight-only int8,
    `aten._weight_int8pack_mm`) through HF `generate` and through the step;
  * speculative_prompt_lookup: `SpeculativeEngine` with prompt lookup (k 4, n-grams 3..1) over
    the bf16 model, whose target still runs the HF forward (the distilled draft of
    `speculative.py` is a `temper distill` output this script does not train);
  * llama_cpp_q8_0: llama.cpp on the Q8_0 GGUF of the same weights (`TEMPERING_Q8_GGUF`, made by
    `bench/diagnostics/make_q8_gguf.py`), one prompt at a time, the same prompt token ids and
    rounds, at 1 thread and at --threads (the faster is the peer: its thread pool spins, and on 2
    cores beside node's own thread 1 thread wins), in its own process after the other sides of
    each round: llama-cpp-python when installed, else
    node-llama-cpp's prebuilt CPU binaries (`TEMPERING_NODE_LLAMA_CPP`; bench/_shared/llama_cpp.py).

Tokens/s = generated tokens / wall seconds, prefill included, as a user waits for them; the
process CPU seconds are recorded too. Rounds (bench/_shared/harness.py): every side once a round
(llama.cpp at each thread count a side of its own), `--warmup-rounds` first and not counted, then
`--rounds` timed rounds; a side's tokens/s is the median of its rounds. The headline is the bf16
step over llama.cpp at its faster thread count (HF `generate` where llama.cpp is not set up),
paired by round, with a bootstrap interval of the median ratio. Writes
bench/results/single_stream.json and, from a headline run only, the two figures
`single_stream_tokens_per_s_bf16` / `_int8` into bench/results/inference.json (its other keys kept).

    flock /work/bench.lock python bench/throughput/single_stream.py [--rounds 5] [--max-new-tokens 128] [--threads 2]
    python bench/throughput/single_stream.py --sides single_stream_int8 --prompts 2   (a quick check: prints)
    python bench/throughput/single_stream.py --quick --out /tmp/ss.json               (a smoke run of every side)
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
from _shared import harness  # noqa: E402
from _shared.llama_cpp import llama_cpp_peer  # noqa: E402
from _shared.paths import RESULTS  # noqa: E402

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain in detail how a CPU executes an instruction.",
    "Describe the water cycle step by step.",
    "Write a letter to a friend about a trip to the mountains.",
    "Explain why the sky is blue, with examples.",
    "List ten tips for learning a new language and explain each.",
    "Describe how bread is made, from flour to loaf.",
    "Write a poem about the ocean at night.",
]


def timed(run, prompts) -> tuple[dict, list[list[int]]]:
    """Wall and CPU seconds of `run(prompt) -> generated token ids` over every prompt, and tokens/s."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = [run(p) for p in prompts]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    tokens = [len(o) for o in out]
    figures = {"seconds": seconds, "cpu_seconds": cpu, "generated_tokens": sum(tokens), "per_prompt": tokens}
    return {**figures, "tokens_per_s": sum(tokens) / seconds}, out


def _common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two answers share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompts", type=int, default=len(PROMPTS), help="the first N prompts (a quick check)")
    p.add_argument(
        "--sides", nargs="+", help="only these sides and single_stream_bf16: prints, writes no results (a quick check)"
    )
    p.add_argument("--out", type=Path, default=RESULTS / "single_stream.json")
    p.add_argument("--inference-json", type=Path, default=RESULTS / "inference.json")
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 prompts, 16 tokens, 1 round")
    harness.add_round_arguments(p)
    args = p.parse_args()
    if args.quick:
        vars(args).update(prompts=2, max_new_tokens=16, rounds=1, warmup_rounds=0)

    import torch

    torch.set_num_threads(args.threads)
    from tempering.config import SamplingParams
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.quantize import quantize_int8
    from tempering.rollout.batching_engine import BatchingEngine
    from tempering.rollout.drafters import PromptLookupDrafter
    from tempering.rollout.speculative import SpeculativeEngine

    tokenizer = load_tokenizer(MODEL)
    model = load_model(MODEL, dtype="bfloat16").eval()
    int8 = quantize_int8(model)
    int8_dynamic = quantize_int8(model, method="dynamic")
    greedy = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    engines = {
        "bf16": BatchingEngine(model, tokenizer, precision="bf16", max_slots=1, max_len=1024),
        "int8": BatchingEngine(int8, tokenizer, precision="bf16", max_slots=1, max_len=1024),
        "int8_dynamic": BatchingEngine(int8_dynamic, tokenizer, precision="fp32", max_slots=1, max_len=1024),
    }
    hf_off = BatchingEngine(model, tokenizer, precision="bf16", max_slots=1, max_len=1024)
    hf_off._single_stream_decoder = lambda: None  # the engine as it decoded a lone request before
    prompts = [engines["bf16"].chat_prompt([{"role": "user", "content": q}]) for q in PROMPTS[: args.prompts]]
    eos = tokenizer.eos_token_id

    def hf_generate(m):
        def run(prompt):
            with torch.no_grad():
                out = m.generate(
                    torch.tensor([prompt]),
                    do_sample=False,
                    max_new_tokens=args.max_new_tokens,
                    eos_token_id=eos,
                    pad_token_id=eos,
                )
            return out[0, len(prompt) :].tolist()

        return run

    def engine_run(engine):
        return lambda prompt: engine.generate([prompt], greedy)[0][0].token_ids

    sides = {
        "hf_generate": hf_generate(model),
        "batching_hf_forward": engine_run(hf_off),
        "single_stream_bf16": engine_run(engines["bf16"]),
        "hf_generate_int8": hf_generate(int8),
        "single_stream_int8": engine_run(engines["int8"]),
        "single_stream_int8_dynamic": engine_run(engines["int8_dynamic"]),
        "speculative_prompt_lookup": engine_run(
            SpeculativeEngine(model, tokenizer, PromptLookupDrafter(3, 1), 4, "bf16")
        ),
    }
    if args.sides:
        sides = {name: sides[name] for name in ["single_stream_bf16", *args.sides] if name in sides}
    build = {}
    for name, run in sides.items():  # warm-up (and the step's one-time weight packing, timed)
        t0 = time.perf_counter()
        run(prompts[0][:8])
        build[name] = time.perf_counter() - t0
    answers: dict[str, list[list[int]]] = {}

    def side(name: str, run):
        def one_round() -> dict:
            figures, answers[name] = timed(run, prompts)
            return figures

        return one_round

    def llama_side(threads: int):
        def one_round() -> dict:  # its own process
            got = llama_cpp_peer(prompts, args.max_new_tokens, threads)
            answers[f"llama_cpp_q8_0_{threads}t"] = got.pop("answers", [])
            return got

        return one_round

    timed_sides = {name: side(name, run) for name, run in sides.items()}
    gguf = os.environ.get("TEMPERING_Q8_GGUF")
    llama_wanted = not args.sides or "llama_cpp_q8_0" in args.sides
    if llama_wanted and gguf and Path(gguf).exists():
        # the peer at its fastest: its threads spin, so 1 can win
        timed_sides |= {f"llama_cpp_q8_0_{t}t": llama_side(t) for t in sorted({1, args.threads})}
    records = harness.interleave(timed_sides, rounds=args.rounds, warmup=args.warmup_rounds)
    runs = {name: harness.side_summary(records, name, "tokens_per_s") for name in timed_sides}
    rates = {name: r["tokens_per_s"] for name, r in runs.items() if "tokens_per_s" in r}
    llama_ran = sorted((n for n in rates if n.startswith("llama_cpp_q8_0")), key=lambda n: rates[n])
    llama_best = llama_ran[-1] if llama_ran else None
    same = {n: [_common_prefix(a, b) for a, b in zip(answers[n], answers["single_stream_bf16"])] for n in rates}
    if llama_best:
        rates["llama_cpp_q8_0"] = rates[llama_best]
        same["llama_cpp_q8_0"] = same[llama_best]
    if args.sides:
        print(json.dumps({"tokens_per_s": rates, "tokens_before_first_difference_from_bf16_step": same}, indent=1))
        return
    result = {
        "model": MODEL,
        "workload": {
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "decoding": "greedy, eos stops, one request at a time",
            "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        },
        "torch_threads": torch.get_num_threads(),
        "tokens_per_s": rates,
        "ratios": {
            "single_stream_bf16_vs_hf_generate": rates["single_stream_bf16"] / rates["hf_generate"],
            "single_stream_bf16_vs_batching_hf_forward": rates["single_stream_bf16"] / rates["batching_hf_forward"],
            "single_stream_int8_vs_hf_generate_int8": rates["single_stream_int8"] / rates["hf_generate_int8"],
            "single_stream_int8_dynamic_vs_single_stream_int8": (
                rates["single_stream_int8_dynamic"] / rates["single_stream_int8"]
            ),
            "speculative_prompt_lookup_vs_single_stream_bf16": (
                rates["speculative_prompt_lookup"] / rates["single_stream_bf16"]
            ),
            "speculative_prompt_lookup_vs_hf_generate": rates["speculative_prompt_lookup"] / rates["hf_generate"],
            "single_stream_bf16_vs_llama_cpp_q8_0": (
                rates["single_stream_bf16"] / rates["llama_cpp_q8_0"] if llama_best else None
            ),
            "single_stream_int8_vs_llama_cpp_q8_0": (
                rates["single_stream_int8"] / rates["llama_cpp_q8_0"] if llama_best else None
            ),
        },
        "greedy_answers_same_as_batching_hf_forward": {
            name: sum(a == b for a, b in zip(answers[name], answers["batching_hf_forward"])) for name in sides
        },
        "greedy_answers_same_as_single_stream_bf16": {
            name: sum(a == b for a, b in zip(answers[name], answers["single_stream_bf16"])) for name in sides
        },
        "greedy_tokens_before_first_difference_from_single_stream_bf16": same,
        "first_call_seconds": build,
        "runs": runs,
        "llama_cpp_q8_0": (
            {"side": llama_best, "tokens_per_s_by_threads": {n: rates[n] for n in llama_ran}}
            if llama_best
            else {"ran": False, "reason": "TEMPERING_Q8_GGUF is not set to a Q8_0 GGUF of the model"}
        ),
    }
    written = harness.write_result(
        args.out,
        benchmark="single_stream",
        host=harness.host("bf16", torch.get_num_threads()),
        rounds=records,
        candidate="single_stream_bf16",
        baseline=llama_best or "hf_generate",
        metric="tokens_per_s",
        max_load=args.max_load,
        extra=result,
    )
    if written["headline"]:
        inference = json.loads(args.inference_json.read_text()) if args.inference_json.exists() else {}
        inference["single_stream_tokens_per_s_bf16"] = rates["single_stream_bf16"]
        inference["single_stream_tokens_per_s_int8"] = rates["single_stream_int8"]
        inference["single_stream_source"] = f"bench/throughput/single_stream.py -> {args.out.name} ({written['date']})"
        args.inference_json.write_text(json.dumps(inference, indent=1) + "\n")
    low, high = written["ratio_ci"]
    print(json.dumps({"tokens_per_s": rates, "ratios": result["ratios"]}, indent=1))
    print(
        f"single_stream_bf16 / {written['baseline']}: median {written['ratio_median']:.2f}x [{low:.2f}, {high:.2f}]"
        f"{' (parity)' if written['parity'] else ''}"
    )


if __name__ == "__main__":
    main()
