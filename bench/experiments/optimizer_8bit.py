"""8-bit vs fp32 AdamW states on the default model: loss curves over the same steps, 3 seeds.

Full-parameter training of SmolLM2-135M on real text found on this machine (the Python standard
library and the licence texts in /usr/share/common-licenses, 64-token chunks, loss on every
token), each run a `temper sft` run (`run_sft`, `data.format: text`, the chunks as text rows, the
held-out loss its `eval_loss_after`), `--steps` optimizer steps per run, batch 2 x 64 tokens, lr 2e-5 with 5 warmup steps, fp32; each seed
fixes the data order, and the two optimizers see the same batches. The claim: the 8-bit curve
stays within the seed-to-seed noise of the fp32 one (per-step paired difference and its 95% CI,
and the final held-out loss of each).

    python bench/experiments/optimizer_8bit.py [--steps 100] [--seeds 0 1 2] [--model default|small]

`--model small` is a 4-layer Llama (hidden 256, the default tokenizer, random weights) trained
from scratch on the same text: the same comparison where a step takes a second instead of a
minute on a loaded machine.

Writes bench/results/optimizer_8bit.json and optimizer_8bit.png.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402
from _shared.product import write_jsonl  # noqa: E402

CHUNK, BATCH = 64, 2


def text_chunks(tokenizer, limit: int) -> list[list[int]]:
    files = sorted(glob.glob("/usr/lib/python3.11/*.py")) + sorted(glob.glob("/usr/share/common-licenses/*"))
    out: list[list[int]] = []
    for path in files:
        ids = tokenizer(Path(path).read_text(errors="ignore"), add_special_tokens=False)["input_ids"]
        out += [ids[i : i + CHUNK] for i in range(0, len(ids) - CHUNK + 1, CHUNK * 7)]  # spread over files
        if len(out) >= limit:
            break
    return out[:limit]


def model_spec(name: str, root: Path) -> str:
    """The model a run starts from: the default model, or (`small`) a 4-layer Llama with random
    weights saved under `root` with the default tokenizer (every seed and optimizer the same)."""
    if name == "default":
        return "smollm2-135m-instruct"
    out = root / "small-llama"
    if out.is_dir():
        return str(out)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tempering.models.load import load_tokenizer

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49_152,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=True,
        pad_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(out)
    load_tokenizer("smollm2-135m-instruct").save_pretrained(out)
    return str(out)


def run(bits: int, seed: int, steps: int, data: dict[str, str], root: Path, model: str, lr: float) -> dict:
    """One `temper sft` run (`run_sft`) on the text files, full parameters, loss on every token."""
    from tempering.config import SFTConfig
    from tempering.recipes.sft import run_sft
    from tempering.tracking.events import read_metrics

    name = f"{bits}bit-{seed}"
    cfg = SFTConfig.model_validate(
        {
            "model": model,
            "lora": None,
            "out": str(root),
            "name": name,
            # a chunk re-tokenized, with its EOS: one piece of at most CHUNK + 8 tokens, unpacked
            "data": {
                "format": "text",
                "train": [data["train"]],
                "eval": [data["held"]],
                "max_length": CHUNK + 8,
                "packing": False,
            },
            "train": {
                "steps": steps,
                "batch_size": BATCH,
                "precision": "fp32",
                "seed": seed,
                "optim": {"lr": lr, "warmup_steps": min(5, steps // 4), "state_bits": bits},
                "checkpoint": {"every": 10_000, "keep_last": 1},
            },
        }
    )
    t0 = time.perf_counter()
    summary = run_sft(cfg)
    losses = [r["loss"] for r in read_metrics(root / name / "metrics.jsonl") if "loss" in r]
    return {"losses": losses, "heldout_loss": summary["eval_loss_after"], "seconds": time.perf_counter() - t0}


def ci(xs: list[float]) -> dict:
    """Mean and sd over seeds with the t-interval of `tempering.evals.stats` (none for one seed)."""
    from tempering.evals.stats import t_interval

    e = t_interval(xs) if len(xs) > 1 else None
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {"mean": statistics.fmean(xs), "sd": sd, "ci95": [e.low, e.high] if e else None, "values": xs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--model", choices=["default", "small"], default="default")
    args = p.parse_args()
    lr = 2e-5 if args.model == "default" else 1e-3
    from tempering.models.load import load_tokenizer

    t_start = time.perf_counter()
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    rows = text_chunks(tokenizer, 1200)
    runs: dict[str, dict[int, dict]] = {"fp32": {}, "8bit": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = {
            split: write_jsonl(root / f"{split}.jsonl", [{"text": tokenizer.decode(r)} for r in part])
            for split, part in (("train", rows[:-40]), ("held", rows[-40:]))
        }
        model = model_spec(args.model, root)
        for seed in args.seeds:
            for name, bits in (("fp32", 32), ("8bit", 8)):
                runs[name][seed] = run(bits, seed, args.steps, data, root, model, lr)
                r = runs[name][seed]
                print(
                    f"{name} seed {seed}: loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}, held-out {r['heldout_loss']:.4f}",
                    flush=True,
                )
    tail = max(1, args.steps // 10)
    last = {k: [statistics.fmean(runs[k][s]["losses"][-tail:]) for s in args.seeds] for k in runs}
    held = {k: [runs[k][s]["heldout_loss"] for s in args.seeds] for k in runs}
    paired = [
        statistics.fmean(b - a for a, b in zip(runs["fp32"][s]["losses"], runs["8bit"][s]["losses"]))
        for s in args.seeds
    ]
    result = {
        "benchmark": "optimizer_8bit",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_name(),
        "note": "shared 2-core machine, other agents' work ran beside it",
        "load_average_at_end": os.getloadavg(),
        "seconds": time.perf_counter() - t_start,
        "model": "smollm2-135m-instruct, full parameters, fp32"
        if args.model == "default"
        else "small: 4-layer Llama, hidden 256, random init, full parameters, fp32",
        "lr": lr,
        "tokens_per_step": CHUNK * BATCH,
        "data": "64-token chunks as text rows; `temper sft` re-tokenizes each and appends EOS",
        "optimizer_8bit": "torchao AdamW8bit (block 256)",
        "steps": args.steps,
        "seeds": args.seeds,
        "train_loss_last_tenth": {k: ci(v) for k, v in last.items()},
        "heldout_loss": {k: ci(v) for k, v in held.items()},
        "paired_mean_step_loss_difference_8bit_minus_fp32": ci(paired),
        "heldout_paired_difference_8bit_minus_fp32": ci([b - a for a, b in zip(held["fp32"], held["8bit"])]),
        "curves": {k: {str(s): [round(x, 4) for x in runs[k][s]["losses"]] for s in args.seeds} for k in runs},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "optimizer_8bit" if args.model == "default" else "optimizer_8bit_small"
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1))
    plot(result, RESULTS / f"{stem}.png")
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("train_loss_last_tenth", "heldout_loss", "paired_mean_step_loss_difference_8bit_minus_fp32")
            },
            indent=1,
        )
    )


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for name, color in (("fp32", "tab:blue"), ("8bit", "tab:orange")):
        for i, curve in enumerate(result["curves"][name].values()):
            ax.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.7, label=f"{name} states" if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(f"{result['model'].split(',')[0]}: AdamW fp32 vs 8-bit states", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
