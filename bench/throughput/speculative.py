"""Speculative decoding on the default model: tokens/s with speculation on vs off, acceptance.

Workload: the arithmetic suite's held-out questions in chat form (the model's answers are
short sentences), greedy, max_new_tokens 64, `--batch` prompts decoded together (1 or 8; one
batch size per run, each run writes its own `timing_batch{B}` block).

Off is the target alone, every way it decodes here, and the headline divides by the fastest
of them (the bar: the FASTEST non-speculative decoding of the same target):
  * `HFEngine` with fp32 weights in fp32; with fp32 weights in bf16 (Linears cast to bf16
    once per call); with the model loaded in bf16 weights;
  * HF `model.generate` and `BatchingEngine`, both on bf16 weights.
On = `SpeculativeEngine` over the same target with the draft `temper distill` made
(examples/distill_draft.yaml), target and draft with the same weights and precision
(`--spec-precisions`, default both loaded in bf16), one row per `--drafts` HEAD:K:MIN_CONFIDENCE:
head `fr` = the draft's LM head restricted to the tokens of its training data (FR-Spec),
`full` = its whole head; MIN_CONFIDENCE > 0 stops a row's proposal after a token the draft
gives less than that probability (HF's default assistant_confidence_threshold is 0.4); plus
prompt lookup. Each configuration decodes the same prompts after a warm-up call; tokens/s =
generated tokens / wall seconds. In bf16 a k-token verify forward rounds differently from a
1-token forward, so near-ties can flip and the token counts differ a little between rows
(fp32 is bit-exact: `lossless`).

    python bench/throughput/speculative.py timing --batch 1 --draft runs/distill-draft/final --data TRAIN.jsonl
    python bench/throughput/speculative.py timing --batch 8 --prompts 48 --draft ... --data ...
    python bench/throughput/speculative.py lossless --lossless-precisions fp32 --draft ... --data ...

`lossless` checks greedy output identical to the target alone on 200 prompts in fp32 with the
`--lossless-draft` configuration (bf16 makes a 1-token and a k-token forward round
differently, so in bf16 even the target alone differs between batch shapes; the bf16
agreement is recorded next to that noise floor when asked for). Both modes update
bench/results/speculative.json; timing runs under the bench lock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

OUT = RESULTS / "speculative.json"
MODEL = "smollm2-135m-instruct"
# keys of an older result layout (one timing per precision, bf16 by autocast over fp32 weights)
STALE_KEYS = (
    "timing_by_precision",
    "batch1_fastest_off",
    "batch1_fastest_speculative",
    "batch8_fastest_off",
    "batch8_fastest_speculative",
    "speculative_speedup_batch1_same_precision",
    "speculative_speedup_batch8_same_precision",
    "timing_load_average_before_after",
)


def prompts_for(engine, n: int, seed: int = 0) -> list[list[int]]:
    from tempering.data.builtin import arithmetic_tasks

    return [engine.chat_prompt(t.chat()) for t in arithmetic_tasks(n, seed=seed, split="heldout")]


def draft_vocab(tokenizer, data: Path) -> list[int]:
    """Token ids of the assistant turns of the draft's training data (the teacher's outputs),
    plus eos: the FR-Spec head of the draft."""
    ids = {tokenizer.eos_token_id}
    for line in data.read_text().splitlines():
        for m in json.loads(line)["messages"]:
            if m["role"] == "assistant":
                ids.update(tokenizer.encode(m["content"]))
    return sorted(ids)


def timed(engine, prompts, batch: int, params) -> dict:
    engine.generate(prompts[:batch], params)  # warm-up
    if hasattr(engine, "stats"):
        engine.stats = type(engine.stats)(engine.k)
    tokens, t0 = 0, time.perf_counter()
    for start in range(0, len(prompts), batch):
        for group in engine.generate(prompts[start : start + batch], params):
            tokens += len(group[0].token_ids)
    seconds = time.perf_counter() - t0
    out = {
        "batch": batch,
        "prompts": len(prompts),
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 2),
    }
    if hasattr(engine, "stats"):
        out.update(engine.stats.summary())
    return out


def load_all(draft_dir: str, dtype: str = "float32"):
    import torch

    from tempering.models.load import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_tokenizer(MODEL), load_model(MODEL, dtype).eval(), load_model(draft_dir, dtype).eval()


class HFGenerate:
    """HF `model.generate` (greedy, HF's own dynamic cache) behind the one call `timed` makes:
    a non-speculative baseline outside Tempering's engines. Counts tokens up to the first eos,
    as the engines do."""

    def __init__(self, model, tokenizer):
        self.model, self.eos, self.pad = model, tokenizer.eos_token_id, tokenizer.pad_token_id

    def generate(self, prompts, params):
        import torch

        from tempering.data.padding import left_pad
        from tempering.rollout.engine import Completion

        ids, mask = left_pad(prompts, self.pad)
        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=params.max_new_tokens,
                eos_token_id=self.eos,
                pad_token_id=self.pad,
            )[:, ids.shape[1] :].tolist()
        cut = [row[: row.index(self.eos) + 1] if self.eos in row else row for row in out]
        return [[Completion(i, row, [], "", "stop")] for i, row in enumerate(cut)]


def run_timing(args) -> dict:
    """One batch size: every non-speculative configuration, then speculation, in one run."""
    import torch

    from tempering.config import SamplingParams
    from tempering.rollout.batching_engine import BatchingEngine
    from tempering.rollout.drafters import ModelDrafter, PromptLookupDrafter
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.speculative import SpeculativeEngine

    torch.set_num_threads(args.threads)
    tokenizer, target32, draft32 = load_all(args.draft)
    _, target16, draft16 = load_all(args.draft, "bfloat16")
    models = {"fp32": (target32, draft32), "bf16": (target16, draft16)}
    prompts = prompts_for(HFEngine(target32, tokenizer, "fp32"), args.prompts)
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    vocab = torch.tensor(draft_vocab(tokenizer, Path(args.data))) if args.data else None
    batch, rows = args.batch, []

    def add(config: str, weights: str, precision: str, engine) -> None:
        rows.append(
            {"config": config, "weights": weights, "precision": precision, **timed(engine, prompts, batch, params)}
        )
        print(rows[-1], flush=True)

    # off: the target alone, every way this repo (or HF) decodes it
    add("off: HFEngine", "fp32", "fp32", HFEngine(target32, tokenizer, "fp32"))
    add("off: HFEngine", "fp32", "bf16", HFEngine(target32, tokenizer, "bf16"))
    add("off: HFEngine", "bf16", "bf16", HFEngine(target16, tokenizer, "bf16"))
    add("off: HF generate", "bf16", "bf16", HFGenerate(target16, tokenizer))
    add(
        "off: BatchingEngine", "bf16", "bf16", BatchingEngine(target16, tokenizer, "bf16", max_slots=batch, max_len=512)
    )
    # on: the same target with the distilled draft, both with the same weights and precision
    for spec in args.spec_precisions:
        weights, precision = spec.split("/")
        target, draft = models[weights]
        for config in args.drafts:
            head, k, confidence = config.split(":")
            if head == "fr" and vocab is None:
                continue
            drafter = ModelDrafter(
                draft,
                precision,
                tokenizer.pad_token_id,
                vocab if head == "fr" else None,
                min_confidence=float(confidence),
            )
            label = f"on: distilled draft, {'FR-Spec' if head == 'fr' else 'full'} head" + (
                f", min_confidence {confidence}" if float(confidence) > 0 else ""
            )
            add(label, weights, precision, SpeculativeEngine(target, tokenizer, drafter, int(k), precision))
    add(
        "on: prompt lookup",
        "bf16",
        "bf16",
        SpeculativeEngine(target16, tokenizer, PromptLookupDrafter(3, 1), args.lookup_k, "bf16"),
    )
    off = max((r for r in rows if r["config"].startswith("off")), key=lambda r: r["tokens_per_s"])
    on = max((r for r in rows if r["config"].startswith("on: distilled")), key=lambda r: r["tokens_per_s"])
    lookup = next(r for r in rows if r["config"] == "on: prompt lookup")
    for r in rows:
        r["vs_fastest_off"] = round(r["tokens_per_s"] / off["tokens_per_s"], 3)
    return {
        f"timing_batch{batch}": {
            "threads": args.threads,
            "workload": f"{args.prompts} arithmetic held-out chat prompts, {batch} at a "
            f"time, greedy, max_new_tokens {args.max_new_tokens}",
            "draft": args.draft,
            "draft_params": sum(p.numel() for p in draft32.parameters()),
            "target_params": sum(p.numel() for p in target32.parameters()),
            "fr_spec_vocab": None if vocab is None else len(vocab),
            "rows": rows,
            "fastest_off": off,
            "fastest_speculative": on,
        },
        f"speculative_speedup_batch{batch}": on["vs_fastest_off"],
        f"prompt_lookup_speedup_batch{batch}": lookup["vs_fastest_off"],
    }


def run_lossless(args) -> dict:
    import torch

    from tempering.config import SamplingParams
    from tempering.rollout.drafters import ModelDrafter
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.speculative import SpeculativeEngine

    torch.set_num_threads(args.threads)
    tokenizer, target, draft = load_all(args.draft)
    head, k, confidence = args.lossless_draft.split(":")
    vocab = torch.tensor(draft_vocab(tokenizer, Path(args.data))) if head == "fr" else None
    out = {}
    for prec in args.lossless_precisions:
        base = HFEngine(target, tokenizer, precision=prec)
        prompts = prompts_for(base, args.lossless_prompts, seed=1)
        params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
        alone = [g[0].token_ids for g in base.generate(prompts, params)]
        drafter = ModelDrafter(draft, prec, tokenizer.pad_token_id, vocab, min_confidence=float(confidence))
        spec = SpeculativeEngine(target, tokenizer, drafter, int(k), prec)
        fast = [g[0].token_ids for g in spec.generate(prompts, params)]
        alone8 = [
            t
            for s in range(0, len(prompts), 8)
            for t in (g[0].token_ids for g in base.generate(prompts[s : s + 8], params))
        ]
        out[prec] = {
            "prompts": len(prompts),
            "identical_to_target_alone": sum(a == b for a, b in zip(alone, fast)),
            "target_alone_batch200_vs_batch8_identical": sum(a == b for a, b in zip(alone, alone8)),
            "acceptance": spec.stats.summary(),
        }
        print(prec, out[prec], flush=True)
    return {
        "greedy_lossless": out,
        "greedy_lossless_settings": {
            "draft": args.draft,
            "head": "FR-Spec" if head == "fr" else "full",
            "k": int(k),
            "min_confidence": float(confidence),
            "max_new_tokens": args.max_new_tokens,
            "prompts": "arithmetic held-out chat prompts (seed 1), all in one batch",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["timing", "lossless"])
    parser.add_argument("--draft", required=True, help="the distilled draft (runs/NAME/final)")
    parser.add_argument("--data", help="the draft's training JSONL (its FR-Spec vocabulary)")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--lossless-prompts", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lookup-k", type=int, default=4, help="timing: k of the prompt-lookup row")
    parser.add_argument("--lossless-draft", default="fr:4:0.4", help="lossless: HEAD:K:MIN_CONFIDENCE")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lossless-precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--batch", type=int, default=1, help="timing: prompts decoded together (1 or 8)")
    parser.add_argument(
        "--drafts",
        nargs="+",
        default=["fr:2:0", "fr:3:0", "fr:4:0", "fr:4:0.4", "fr:6:0.4", "full:4:0.4"],
        help="timing: HEAD:K:MIN_CONFIDENCE of each speculative row (head fr = FR-Spec, full)",
    )
    parser.add_argument(
        "--spec-precisions",
        nargs="+",
        default=["bf16/bf16"],
        help="timing: WEIGHTS/COMPUTE of target and draft under speculation (bf16/bf16, fp32/bf16, fp32/fp32)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = run_timing(args) if args.mode == "timing" else run_lossless(args)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for stale in STALE_KEYS:
        previous.pop(stale, None)
    if args.mode == "timing":
        block = result[f"timing_batch{args.batch}"]
        block.update(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            load_average_before_after=[load_before, os.getloadavg()],
        )
        # every run stays on record: its headline, and its rows once a newer run replaces them
        previous.setdefault(f"speculative_speedup_batch{args.batch}_every_run", []).append(
            {
                "date": block["date"],
                "draft": args.draft,
                "speedup": result[f"speculative_speedup_batch{args.batch}"],
                "fastest_off_tokens_per_s": block["fastest_off"]["tokens_per_s"],
                "fastest_speculative_tokens_per_s": block["fastest_speculative"]["tokens_per_s"],
            }
        )
        if f"timing_batch{args.batch}" in previous:
            previous.setdefault(f"timing_batch{args.batch}_earlier_runs", []).append(
                previous[f"timing_batch{args.batch}"]
            )
        # the headline: the median over every run with this draft (one run on 2 shared cores
        # varies by ~15%), so a lucky latest run does not set it
        runs = [r for r in previous[f"speculative_speedup_batch{args.batch}_every_run"] if r["draft"] == args.draft]
        result[f"speculative_speedup_batch{args.batch}"] = statistics.median(r["speedup"] for r in runs)
        result[f"speculative_speedup_batch{args.batch}_runs"] = len(runs)
    else:
        result["lossless_load_average_before_after"] = [load_before, os.getloadavg()]
    previous.update(result)
    previous.update(
        {
            "benchmark": "speculative",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "model": MODEL,
            "cpu": cpu_name(),
            "cpu_count": os.cpu_count(),
            "note": "2 shared cores; timing ran alone under the bench lock while other agents' work ran "
            "at nice 19; lossless ran at nice 19 (no timing)",
        }
    )
    OUT.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
