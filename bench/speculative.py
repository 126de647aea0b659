"""Speculative decoding on the default model: tokens/s with speculation on vs off, acceptance.

Workload: the arithmetic suite's held-out questions in chat form (the model's answers are
short sentences), greedy, max_new_tokens 64; batch 1 (one prompt at a time) and batch 8.
Off = `HFEngine` (the engine every caller uses); on = `SpeculativeEngine` over the same
target with (a) the draft `temper distill` made (examples/distill_draft.yaml), with its full
LM head and with its head restricted to the tokens of the teacher's generations (FR-Spec),
for k in --ks, and (b) prompt lookup. Each configuration decodes the same prompts after a
warm-up call; tokens/s = generated tokens / wall seconds.

    python bench/speculative.py timing --draft runs/distill-draft/final   # under the bench lock
    python bench/speculative.py lossless --draft runs/distill-draft/final # 200 prompts, fp32

`lossless` checks greedy output identical to the target alone on 200 prompts in fp32 (bf16
autocast makes a 1-token and a k-token forward round differently, so in bf16 even the target
alone differs between batch shapes; the bf16 agreement is recorded next to that noise floor).
Both modes update bench/results/speculative.json.
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
OUT = HERE / "results" / "speculative.json"
MODEL = "smollm2-135m-instruct"


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
        for group in engine.generate(prompts[start:start + batch], params):
            tokens += len(group[0].token_ids)
    seconds = time.perf_counter() - t0
    out = {"batch": batch, "prompts": len(prompts), "tokens": tokens, "seconds": round(seconds, 2),
           "tokens_per_s": round(tokens / seconds, 2)}
    if hasattr(engine, "stats"):
        out.update(engine.stats.summary())
    return out


def load_all(draft_dir: str):
    import torch

    from tempering.models.load import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_tokenizer(MODEL), load_model(MODEL).eval(), load_model(draft_dir).eval()


def run_timing(args) -> dict:
    import torch

    from tempering.config import SamplingParams
    from tempering.rollout.drafters import ModelDrafter, PromptLookupDrafter
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.speculative import SpeculativeEngine

    torch.set_num_threads(args.threads)
    tokenizer, target, draft = load_all(args.draft)
    base = HFEngine(target, tokenizer, precision=args.precision)
    prec = base.precision
    prompts = prompts_for(base, args.prompts)
    params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
    vocab = torch.tensor(draft_vocab(tokenizer, Path(args.data))) if args.data else None
    rows = []
    for batch in (1, 8):
        off = timed(base, prompts, batch, params)
        rows.append({"config": "off (HFEngine)", **off})
        print(rows[-1], flush=True)
        drafts = [("distilled draft", None)] + ([("distilled draft, FR-Spec head", vocab)] if vocab is not None else [])
        for label, v in drafts:
            for k in args.ks:
                eng = SpeculativeEngine(target, tokenizer, ModelDrafter(draft, prec, tokenizer.pad_token_id, v), k, prec)
                r = timed(eng, prompts, batch, params)
                rows.append({"config": label, "speedup": round(r["tokens_per_s"] / off["tokens_per_s"], 3), **r})
                print(rows[-1], flush=True)
        eng = SpeculativeEngine(target, tokenizer, PromptLookupDrafter(3, 1), max(args.ks), prec)
        r = timed(eng, prompts, batch, params)
        rows.append({"config": "prompt lookup", "speedup": round(r["tokens_per_s"] / off["tokens_per_s"], 3), **r})
        print(rows[-1], flush=True)

    def best(batch: int, label: str) -> dict:
        return max((r for r in rows if r["batch"] == batch and r["config"].startswith(label)),
                   key=lambda r: r["tokens_per_s"])

    return {"timing_by_precision": {prec: {
        "threads": args.threads, "workload": f"{args.prompts} arithmetic held-out chat "
        f"prompts, greedy, max_new_tokens {args.max_new_tokens}", "draft": args.draft,
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "target_params": sum(p.numel() for p in target.parameters()),
        "fr_spec_vocab": None if vocab is None else len(vocab),
        "rows": rows,
        "speedup_batch1": best(1, "distilled")["speedup"], "best_batch1": best(1, "distilled"),
        "best_batch8": best(8, "distilled"),
        "prompt_lookup_speedup_batch1": best(1, "prompt lookup")["speedup"],
        "prompt_lookup_speedup_batch8": best(8, "prompt lookup")["speedup"],
    }}}


def headline(by_precision: dict) -> dict:
    """Speedups against the fastest "off" of any precision measured (fp32 decodes faster than
    bf16 autocast at batch 1 on this host), each side at its own fastest precision."""
    out = {}
    for batch in (1, 8):
        rows = [dict(r, precision=p) for p, t in by_precision.items() for r in t["rows"] if r["batch"] == batch]
        off = max((r for r in rows if r["config"].startswith("off")), key=lambda r: r["tokens_per_s"])
        on = max((r for r in rows if r["config"].startswith("distilled")), key=lambda r: r["tokens_per_s"])
        lookup = max((r for r in rows if r["config"] == "prompt lookup"), key=lambda r: r["tokens_per_s"])
        out[f"speculative_speedup_batch{batch}"] = round(on["tokens_per_s"] / off["tokens_per_s"], 3)
        out[f"prompt_lookup_speedup_batch{batch}"] = round(lookup["tokens_per_s"] / off["tokens_per_s"], 3)
        out[f"batch{batch}_fastest_off"] = off
        out[f"batch{batch}_fastest_speculative"] = on
    return out


def run_lossless(args) -> dict:
    import torch

    from tempering.config import SamplingParams
    from tempering.rollout.drafters import ModelDrafter
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.speculative import SpeculativeEngine

    torch.set_num_threads(args.threads)
    tokenizer, target, draft = load_all(args.draft)
    out = {}
    for prec in args.lossless_precisions:
        base = HFEngine(target, tokenizer, precision=prec)
        prompts = prompts_for(base, args.lossless_prompts, seed=1)
        params = SamplingParams(temperature=0, max_new_tokens=args.max_new_tokens)
        alone = [g[0].token_ids for g in base.generate(prompts, params)]
        spec = SpeculativeEngine(target, tokenizer, ModelDrafter(draft, prec, tokenizer.pad_token_id), 4, prec)
        fast = [g[0].token_ids for g in spec.generate(prompts, params)]
        alone8 = [t for s in range(0, len(prompts), 8)
                  for t in (g[0].token_ids for g in base.generate(prompts[s:s + 8], params))]
        out[prec] = {"prompts": len(prompts), "identical_to_target_alone": sum(a == b for a, b in zip(alone, fast)),
                     "target_alone_batch200_vs_batch8_identical": sum(a == b for a, b in zip(alone, alone8)),
                     "acceptance": spec.stats.summary()}
        print(prec, out[prec], flush=True)
    return {"greedy_lossless": out, "greedy_lossless_settings": {"draft": args.draft, "k": 4,
            "max_new_tokens": args.max_new_tokens, "prompts": "arithmetic held-out chat prompts (seed 1)"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["timing", "lossless"])
    parser.add_argument("--draft", required=True, help="the distilled draft (runs/NAME/final)")
    parser.add_argument("--data", help="the draft's training JSONL (its FR-Spec vocabulary)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--lossless-prompts", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lossless-precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--precision", default="auto", help="timing: auto (bf16 here) | bf16 | fp32")
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = run_timing(args) if args.mode == "timing" else run_lossless(args)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    if "timing_by_precision" in result:
        previous.setdefault("timing_by_precision", {}).update(result.pop("timing_by_precision"))
        previous.update(headline(previous["timing_by_precision"]))
    previous.update(result)
    previous.update({"benchmark": "speculative", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "model": MODEL, "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                     f"{args.mode}_load_average_before_after": [load_before, os.getloadavg()],
                     "note": "2 shared cores; timing ran alone under the bench lock while other agents' work ran "
                             "at nice 19; lossless ran at nice 19 (no timing)"})
    OUT.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
