"""Eval throughput: Tempering's suite runner vs batched HF `generate`, lm-evaluation-harness's HF
backend, and (history) a plain per-sample `model.generate` loop.

Same model (the default, weights in --precision), same suite (arithmetic-add: 100 held-out additions, the
canonical template only), same sampling (4 samples per task, temperature and top-p of the
suite, max_new_tokens 32, eos stops), same scorer (the suite's numeric verifier), the same torch
threads (--threads, 2 by default) on every side. Every side runs in this one process after a
warm-up generate, the sides interleaved over rounds (bench/_shared/harness.py: `--warmup-rounds`
first and not counted, then `--rounds` timed rounds; a side's figures are its rounds' medians).
Each HF and lm-eval batch size is a side of its own; the headline is tempering over the HF batch
size with the highest median samples/s, paired by round, with a bootstrap interval of the median
ratio.

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
        [--rounds 5 --warmup-rounds 1] [--quick]

`--per-sample-tasks 0` leaves the per-sample side out; `--quick` is a smoke run (never a headline).
Writes bench/results/eval.json (or --out) and prints a summary.
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
from _shared import harness  # noqa: E402
from _shared.paths import RESULTS  # noqa: E402

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


QUICK = {"tasks": 4, "samples": 2, "max_new_tokens": 8, "per_sample_tasks": 1, "hf_batches": "4"}
QUICK |= {"lm_eval_batches": "", "rounds": 1, "warmup_rounds": 0}
"""`--quick`: the smallest run that goes through every side (a smoke check, never a headline)."""


def parse_args() -> argparse.Namespace:
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
    p.add_argument("--per-sample-tasks", type=int, default=20, help="tasks the per-sample loop runs (0: no such side)")
    p.add_argument("--threads", type=int, default=2, help="torch threads, every side")
    p.add_argument("--hf-batches", default="16,50,100", help="prompts per HF generate call, each its own side")
    p.add_argument("--lm-eval-batches", default="16,64", help="lm-eval HF backend batch sizes, each its own side")
    p.add_argument("--out", type=Path, default=RESULTS / "eval.json")
    p.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    harness.add_round_arguments(p)
    args = p.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    return args


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def build_sides(args, engine, model, tokenizer, suite) -> tuple[dict, dict]:
    """The sides as closures over the loaded model, and why a peer side is missing (lm-eval)."""
    import tempfile

    sides = {"tempering": lambda: run_tempering(engine, suite, args.samples)}
    if args.per_sample_tasks:
        sides["per_sample_generate"] = lambda: run_per_sample(
            model, tokenizer, suite, args.samples, args.per_sample_tasks
        )
    for b in _sizes(args.hf_batches):
        sides[f"hf_generate_batched_{b}"] = lambda b=b: run_hf_batched(model, tokenizer, suite, args.samples, b)
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        return sides, {"lm_eval_hf": "lm_eval is not installed (pip install 'lm_eval[hf]==0.4.13')"}

    def lm_eval_side(b: int) -> dict:
        with tempfile.TemporaryDirectory() as work:
            return run_lm_eval(model, tokenizer, suite, args.samples, b, Path(work))

    for b in _sizes(args.lm_eval_batches):
        sides[f"lm_eval_hf_{b}"] = lambda b=b: lm_eval_side(b)
    return sides, {}


def _best(runs: dict, prefix: str) -> str | None:
    """The side named `prefix*` with the highest median samples/s (None: no such side ran)."""
    ran = [n for n, r in runs.items() if n.startswith(prefix) and "samples_per_s" in r]
    return max(ran, key=lambda n: runs[n]["samples_per_s"]) if ran else None


def main() -> None:
    args = parse_args()
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

    sides, not_run = build_sides(args, engine, model, tokenizer, suite)
    records = harness.interleave(sides, rounds=args.rounds, warmup=args.warmup_rounds)
    runs = {n: harness.side_summary(records, n, "samples_per_s") for n in sides}
    best_hf, best_lm = _best(runs, "hf_generate_batched_"), _best(runs, "lm_eval_hf_")
    if best_hf is None:
        sys.exit("no ratio: needs an --hf-batches side")
    ours = runs["tempering"]

    def over(side: str | None, key: str) -> float | None:
        return ours[key] / runs[side][key] if side else None

    result = {
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
        "threads_note": "the same torch threads on every side; run alone (load average recorded per round)",
        "per_sample_subset_note": (
            f"the per-sample loop ran the first {args.per_sample_tasks} of {args.tasks} tasks "
            f"(all {args.samples} samples each); its samples/s is measured on that subset and "
            "taken as the rate for all tasks (the tasks are alike: one 2-digit addition each)"
        ),
        "best_hf_generate_batched": best_hf,
        "best_lm_eval_hf": best_lm,
        # ratios of the sides' medians; the headline ratio_median / ratio_ci pair rounds
        "ratio_samples_per_s_vs_per_sample": over(
            "per_sample_generate" if args.per_sample_tasks else None, "samples_per_s"
        ),
        "ratio_samples_per_s_vs_hf_generate_batched": over(best_hf, "samples_per_s"),
        "ratio_generated_tokens_per_s_vs_hf_generate_batched": over(best_hf, "generated_tokens_per_s"),
        "ratio_samples_per_s_vs_lm_eval_hf": over(best_lm, "samples_per_s"),
        "ratio_generated_tokens_per_s_vs_lm_eval_hf": over(best_lm, "generated_tokens_per_s"),
        "peers_note": (
            "hf_generate_batched_B: every prompt once per call with num_return_sequences, B prompts a call, "
            "each B its own side; lm_eval_hf_B: lm-evaluation-harness's HF backend over the same "
            "loaded model, the same items as a generate_until task (chat template, repeats = samples), "
            "its whole simple_evaluate timed, batch size B; lm-eval returns "
            "text, so its generated tokens are its answers re-tokenised (the eos not counted)"
        ),
        "target_ratio": 15.0,
        "runs": runs,
        "not_run": not_run,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    written = harness.write_result(
        args.out,
        benchmark="eval",
        host=harness.host(args.precision, torch.get_num_threads()),
        rounds=records,
        candidate="tempering",
        baseline=best_hf,
        metric="samples_per_s",
        max_load=args.max_load,
        extra=result,
    )
    low, high = written["ratio_ci"]
    print(
        f"\ntempering {ours['samples_per_s']:.2f} samples/s; over {best_hf}: median {written['ratio_median']:.2f}x "
        f"[{low:.2f}, {high:.2f}]{' (parity)' if written['parity'] else ''}; over lm-eval "
        f"{result['ratio_samples_per_s_vs_lm_eval_hf']}; over per-sample {result['ratio_samples_per_s_vs_per_sample']} "
        f"-> {args.out}"
    )


if __name__ == "__main__":
    main()
