"""Eval throughput: Tempering's suite runner vs batched HF `generate`, lm-evaluation-harness's HF
backend, and (history) a plain per-sample `model.generate` loop.

Same model (the default, weights in --precision), same suite (arithmetic-add: 100 held-out additions, the
canonical template only), same sampling (4 samples per task, temperature and top-p of the
suite, max_new_tokens 32, eos stops), same scorer (the suite's numeric verifier), the same torch
threads (--threads, 2 by default) on every side. Every side runs in this one process, one
after the other, after a warm-up generate.

  * tempering: `run_suite` on the default engine (`EngineSettings()`: continuous batching,
    `BatchingEngine`) -- one prefill per prompt shared by its samples, slot KV cache,
    finished sequences replaced by waiting ones at once, scoring in a thread pool.
  * hf_generate_batched: `model.generate(do_sample=True, num_return_sequences=samples)` on
    --hf-batches left-padded prompts a call (each size tried, the fastest kept), same verifier.
  * lm_eval_hf: lm-evaluation-harness 0.4.13 (`pip install 'lm_eval[hf]==0.4.13'`, a bench peer
    `make` does not install) with its HF backend over the same loaded model, the items as a
    `generate_until` task (chat template, `repeats`), each --lm-eval-batches size tried.
  * per_sample: for each task, for each sample, `model.generate(do_sample=True, ...)` on
    that one prompt (HF's own KV cache), then the same verifier (the earlier headline's peer).

Samples/s is samples over wall seconds, scoring included. The per-sample side is slow, so
by default it runs on the first `--per-sample-tasks` tasks (all 4 samples each) and its
samples/s is extrapolated from that subset (recorded in the JSON); generated tokens per
second are reported too, since both sides sample answers of different lengths.

    python bench/throughput/eval.py [--tasks 100] [--samples 4] [--max-new-tokens 32] [--per-sample-tasks 20]

Writes bench/results/eval.json and prints a summary.
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
from _shared.paths import RESULTS, cpu_name  # noqa: E402

MODEL = "smollm2-135m-instruct"


def bench_suite(tasks: int, max_new_tokens: int):
    from tempering.evals.suite import load_suite

    suite = load_suite("arithmetic-add").with_overrides(limit=tasks)
    return suite.model_copy(
        update={
            "templates": ["{prompt}"],
            "metrics": ["accuracy"],
            "sampling": suite.sampling.model_copy(update={"max_new_tokens": max_new_tokens}),
        }
    )


def run_tempering(engine, suite, samples: int) -> dict:
    from tempering.evals.runner import run_suite

    calls = []
    real = engine.generate

    def counting(prompts, params):
        groups = real(prompts, params)
        calls.append(sum(len(c.token_ids) for g in groups for c in g))
        return groups

    engine.generate = counting
    t0 = time.perf_counter()
    result = run_suite(suite, engine, samples=samples, model_hash="bench")  # no cache
    seconds = time.perf_counter() - t0
    engine.generate = real
    n = len(suite.task_list) * samples
    return {
        "samples": n,
        "seconds": seconds,
        "samples_per_s": n / seconds,
        "generated_tokens": sum(calls),
        "generated_tokens_per_s": sum(calls) / seconds,
        "generate_calls": len(calls),
        "accuracy": result.metrics["accuracy"].mean,
        "truncation_rate": result.truncation_rate,
    }


def sampled(model, tokenizer, sampling, inputs, n: int) -> list[list[int]]:
    """HF `generate` of `n` samples per prompt row of `inputs` under the suite's sampling (top-k
    off, eos stops); the new tokens of each sample, padding after eos included."""
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs,
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=0,
            num_return_sequences=n,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    return out[:, inputs["input_ids"].shape[1] :].tolist()


def run_per_sample(model, tokenizer, suite, samples: int, tasks: int) -> dict:
    """HF generate one sample at a time on the first `tasks` tasks; the same verifier scores each."""
    from tempering.evals.suite import render_messages

    s = suite.sampling
    chosen = suite.task_list[:tasks]
    texts: list[list[str]] = []
    truncated = tokens = 0
    t0 = time.perf_counter()
    for task in chosen:
        ids = tokenizer.apply_chat_template(
            render_messages(task, "{prompt}"), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        texts.append([])
        for _ in range(samples):
            new = sampled(model, tokenizer, s, ids, 1)[0]
            tokens += len(new)
            truncated += tokenizer.eos_token_id not in new
            texts[-1].append(tokenizer.decode(new, skip_special_tokens=True))
    seconds = time.perf_counter() - t0
    return {
        "tasks_run": len(chosen),
        **_score_texts(suite, texts, tokens, truncated, seconds),
        "extrapolated": len(chosen) < len(suite.task_list),
        "extrapolated_seconds_all_tasks": seconds * len(suite.task_list) / len(chosen),
    }


def _score_texts(suite, texts_by_task: list[list[str]], tokens: int, truncated: int, seconds: float) -> dict:
    """A peer's figures: its answers (per task, in suite order) scored by the suite's verifier
    after its clock stopped (Tempering's runner scores inside its time: the peers are favoured,
    by a few ms over 400 numeric answers)."""
    from tempering.verifiers import score

    n = sum(map(len, texts_by_task))
    correct = sum(score(task, t).value >= 1.0 for task, texts in zip(suite.task_list, texts_by_task) for t in texts)
    return {
        "samples": n,
        "seconds": seconds,
        "samples_per_s": n / seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / seconds,
        "accuracy": correct / n,
        "truncation_rate": truncated / n,
    }


def run_hf_batched(model, tokenizer, suite, samples: int, batch: int) -> dict:
    """HF `generate` on `batch` left-padded prompts a call, `num_return_sequences=samples`, the
    suite's sampling; the same verifier scores each (after the clock, `_score_texts`)."""

    from tempering.evals.suite import render_messages

    s, eos = suite.sampling, tokenizer.eos_token_id
    prompts = [
        tokenizer.apply_chat_template(render_messages(t, "{prompt}"), add_generation_prompt=True, tokenize=False)
        for t in suite.task_list
    ]
    texts: list[list[str]] = []
    tokens = truncated = 0
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    t0 = time.perf_counter()
    try:
        for start in range(0, len(prompts), batch):
            enc = tokenizer(prompts[start : start + batch], return_tensors="pt", padding=True, add_special_tokens=False)
            rows = sampled(model, tokenizer, s, enc, samples)
            for k in range(0, len(rows), samples):
                group = []
                for row in rows[k : k + samples]:
                    row = row[: row.index(eos) + 1] if eos in row else row
                    tokens += len(row)
                    truncated += eos not in row
                    group.append(tokenizer.decode(row, skip_special_tokens=True))
                texts.append(group)
        seconds = time.perf_counter() - t0
    finally:
        tokenizer.padding_side = side
    return {"batch_prompts": batch, **_score_texts(suite, texts, tokens, truncated, seconds)}


def run_lm_eval(model, tokenizer, suite, samples: int, batch: int, workdir: Path) -> dict:
    """lm-evaluation-harness's HF backend (`HFLM` over the same loaded model) on the same items as
    a `generate_until` task with the tokenizer's chat template, `repeats: samples` and the
    suite's sampling; its whole `simple_evaluate` is timed; our verifier scores its answers."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    s = suite.sampling
    items = workdir / "items.jsonl"
    items.write_text("".join(json.dumps({"i": i, "prompt": t.prompt}) + "\n" for i, t in enumerate(suite.task_list)))
    (workdir / "task.yaml").write_text(
        "\n".join(
            [
                "task: tempering_bench_arith",
                "dataset_path: json",
                "dataset_kwargs:",
                f"  data_files: {{test: {items}}}",
                "test_split: test",
                "output_type: generate_until",
                'doc_to_text: "{{prompt}}"',
                'doc_to_target: ""',
                f"repeats: {samples}",
                "generation_kwargs:",
                "  until: []",
                "  do_sample: true",
                f"  temperature: {s.temperature}",
                f"  top_p: {s.top_p}",
                "  top_k: 0",
                f"  max_gen_toks: {s.max_new_tokens}",
                "metric_list:",
                "  - metric: exact_match",
                "",
            ]
        )
    )
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch, max_length=2048)
    t0 = time.perf_counter()
    out = lm_eval.simple_evaluate(
        model=lm,
        tasks=["tempering_bench_arith"],
        task_manager=TaskManager(include_path=str(workdir)),
        apply_chat_template=True,
        log_samples=True,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )
    seconds = time.perf_counter() - t0
    docs = sorted(out["samples"]["tempering_bench_arith"], key=lambda d: d["doc"]["i"])
    texts = [[x for r in d["resps"] for x in (r if isinstance(r, list) else [r])] for d in docs]
    tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for g in texts for t in g)
    # lm-eval strips the stop string and returns text: a sample that used all max_gen_toks counts as truncated
    truncated = sum(
        len(tokenizer(t, add_special_tokens=False)["input_ids"]) >= s.max_new_tokens for g in texts for t in g
    )
    return {
        "batch_size": batch,
        "lm_eval": lm_eval.__version__,
        "first_request": str(docs[0]["arguments"])[:400],
        "first_answers": texts[0],
        **_score_texts(suite, texts, tokens, truncated, seconds),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default="bf16",
        help="weights and compute of both sides (bf16: what `auto` picks on a CPU with native bf16)",
    )
    p.add_argument("--max-slots", type=int, default=None, help="engine.max_slots (default: EngineSettings')")
    p.add_argument("--per-sample-tasks", type=int, default=20, help="tasks the per-sample loop runs (subset)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, every side")
    p.add_argument("--hf-batches", default="16,50,100", help="prompts per HF generate call, each tried")
    p.add_argument("--lm-eval-batches", default="16,64", help="lm-eval HF backend batch sizes, each tried")
    p.add_argument("--out", type=Path, default=RESULTS / "eval.json")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from tempering.config import EngineSettings
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.engine import SamplingParams
    from tempering.rollout.select import build_engine

    model = load_model(MODEL, dtype={"bf16": "bfloat16", "fp32": "float32"}[args.precision])
    tokenizer = load_tokenizer(MODEL)
    model.eval()
    settings = EngineSettings(**({"max_slots": args.max_slots} if args.max_slots else {}))
    engine = build_engine(settings, model, tokenizer, args.precision)
    suite = bench_suite(args.tasks, args.max_new_tokens)
    warm = engine.chat_prompt(suite.task_list[0].chat())
    engine.generate([warm], SamplingParams(n=2, max_new_tokens=4, seed=0))
    model.generate(torch.tensor([warm]), do_sample=True, max_new_tokens=4, pad_token_id=tokenizer.pad_token_id)

    load_before = os.getloadavg()
    print(f"tempering runner: {args.tasks} tasks x {args.samples} samples ...", flush=True)
    tempering = run_tempering(engine, suite, args.samples)
    print(f"  {tempering['samples_per_s']:.2f} samples/s", flush=True)
    print(f"per-sample generate: {args.per_sample_tasks} tasks x {args.samples} samples ...", flush=True)
    per_sample = run_per_sample(model, tokenizer, suite, args.samples, args.per_sample_tasks)
    print(f"  {per_sample['samples_per_s']:.2f} samples/s", flush=True)
    ratio = tempering["samples_per_s"] / per_sample["samples_per_s"]
    batched = {}
    for b in [int(x) for x in args.hf_batches.split(",") if x]:
        print(f"HF generate, {b} prompts x {args.samples} samples a call ...", flush=True)
        batched[str(b)] = run_hf_batched(model, tokenizer, suite, args.samples, b)
        print(f"  {batched[str(b)]['samples_per_s']:.2f} samples/s", flush=True)
    lm_eval_runs: dict = {}
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        lm_eval_runs = {"ran": False, "reason": "lm_eval is not installed (pip install 'lm_eval[hf]==0.4.13')"}
    else:
        import tempfile

        for b in [int(x) for x in args.lm_eval_batches.split(",") if x]:
            print(f"lm-eval HF backend, batch size {b} ...", flush=True)
            with tempfile.TemporaryDirectory() as work:
                lm_eval_runs[str(b)] = run_lm_eval(model, tokenizer, suite, args.samples, b, Path(work))
            print(f"  {lm_eval_runs[str(b)]['samples_per_s']:.2f} samples/s", flush=True)
    best_hf = max(batched.values(), key=lambda r: r["samples_per_s"]) if batched else None
    lm_ran = {k: v for k, v in lm_eval_runs.items() if isinstance(v, dict)}
    best_lm = max(lm_ran.values(), key=lambda r: r["samples_per_s"]) if lm_ran else None
    result = {
        "benchmark": "eval",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": f"{MODEL} (weights in {args.precision})",
        "precision": args.precision,
        "suite": "arithmetic-add (canonical template only)",
        "tasks": args.tasks,
        "samples_per_task": args.samples,
        "sampling": {
            "temperature": suite.sampling.temperature,
            "top_p": suite.sampling.top_p,
            "max_new_tokens": args.max_new_tokens,
            "stop": "eos",
        },
        "engine": {"class": type(engine).__name__, **settings.model_dump(exclude={"vllm"})},
        "torch_threads": torch.get_num_threads(),
        "threads_note": "the same torch threads on every side; run alone (load average recorded)",
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "per_sample_subset_note": (
            f"the per-sample loop ran the first {per_sample['tasks_run']} of {args.tasks} tasks "
            f"(all {args.samples} samples each); its samples/s is measured on that subset and "
            "taken as the rate for all tasks (the tasks are alike: one 2-digit addition each)"
        ),
        "ratio_samples_per_s": ratio,
        "ratio_samples_per_s_vs_hf_generate_batched": (
            tempering["samples_per_s"] / best_hf["samples_per_s"] if best_hf else None
        ),
        "ratio_generated_tokens_per_s_vs_hf_generate_batched": (
            tempering["generated_tokens_per_s"] / best_hf["generated_tokens_per_s"] if best_hf else None
        ),
        "ratio_samples_per_s_vs_lm_eval_hf": tempering["samples_per_s"] / best_lm["samples_per_s"] if best_lm else None,
        "ratio_generated_tokens_per_s_vs_lm_eval_hf": (
            tempering["generated_tokens_per_s"] / best_lm["generated_tokens_per_s"] if best_lm else None
        ),
        "peers_note": (
            "hf_generate_batched: every prompt once per call with num_return_sequences, each batch size "
            "tried, the fastest kept; lm_eval_hf: lm-evaluation-harness's HF backend over the same "
            "loaded model, the same items as a generate_until task (chat template, repeats = samples), "
            "its whole simple_evaluate timed, each batch size tried, the fastest kept; lm-eval returns "
            "text, so its generated tokens are its answers re-tokenised (the eos not counted)"
        ),
        "ratio_generated_tokens_per_s": tempering["generated_tokens_per_s"] / per_sample["generated_tokens_per_s"],
        "target_ratio": 15.0,
        "runs": {
            "tempering": tempering,
            "per_sample_generate": per_sample,
            "hf_generate_batched": batched,
            "lm_eval_hf": lm_eval_runs,
        },
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\nratio tempering / per-sample: {ratio:.2f}x samples/s "
        f"({result['ratio_generated_tokens_per_s']:.2f}x generated tokens/s), target 15x -> {args.out}"
    )


if __name__ == "__main__":
    main()
