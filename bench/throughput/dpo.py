"""DPO throughput: Tempering vs TRL's DPOTrainer, side by side in one benchmark run.

Same pairs (conversational, built below: a system + user prompt and two answers of
varying length), same model (the default, LoRA r=16 on all linear layers), same batch
(pairs per optimizer step), same loss (sigmoid DPO, beta 0.1), same precision ("auto":
bf16 autocast where the CPU has native bf16, else fp32). Each framework runs in its own
child process, one after the other, so peak RSS is its own and neither competes for the
cores. Both are timed over the same optimizer steps after warm-up (pairs/s).

Peers: TRL as configured by default (reference = the model with adapters disabled, a
forward per step) and TRL with `precompute_ref_log_probs=True` (its fastest setting for a
fixed reference). Tempering runs as `temper dpo` does (the DPO recipe through `run_training`) and
caches its reference log-probs once; that one-time cost (with the model's load: the recipe's
components, in a fresh cache) is reported separately (`reference_s`) and folded into `epoch_pairs_per_s` (one pass over the
pairs, precompute included) for both it and TRL's precompute mode. The headline
`ratio_pairs_per_s` is Tempering at its defaults vs the faster TRL setting on timed steps;
`ratio_pairs_per_s_compiled` with `train.compile: true` (per-layer torch.compile, which pays
in bench/throughput/sft.py; here each batch's new answer lengths cost recompiles).

Rounds (bench/_shared/harness.py): every side runs once a round in a fresh process, `--warmup-rounds`
first and not counted, then `--rounds` timed rounds; a side's figures are its rounds' medians, and the
headline ratio (Tempering at its defaults over the TRL side with the higher median) is paired by
round, with a bootstrap interval of the median ratio. `--quick` is a smoke run (never a headline).

    flock /work/bench.lock python bench/throughput/dpo.py [--steps 3] [--warmup 1] [--batch 8] [--pairs 64] [--rounds 5]

Writes bench/results/dpo.json (or --results) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared import harness  # noqa: E402
from _shared.paths import RESULTS  # noqa: E402

LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}
WORDS = (
    "the model answer number value check result step first then because so we add carry digit "
    "total sum plan test file line count list error fix clear short long reason"
).split()


def make_pairs(n: int, seed: int = 0) -> list[dict]:
    """Conversational pairs: prompt ~40-90 tokens, answers ~10-120 tokens (deterministic)."""
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."

    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        prompt = [
            {"role": "system", "content": text(10, 30)},
            {"role": "user", "content": f"{text(5, 30)} What is {a}+{b}?"},
        ]
        out.append(
            {
                "prompt": prompt,
                "chosen": [{"role": "assistant", "content": f"{text(5, 80)} {a + b}"}],
                "rejected": [{"role": "assistant", "content": f"{text(5, 80)} {a + b + 1}"}],
            }
        )
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_tempering(
    model_dir: str, pairs: list[dict], batch: int, steps: int, warmup: int, compile_layers: bool = False
) -> dict:
    """Tempering's DPO path, as `temper dpo` runs it (`recipes.dpo.DPO` through `run_training`, the
    pairs written as the config's data file, the reference cached in a fresh cache so that it is
    computed), timing steps warmup+1 .. warmup+steps."""
    import torch

    from _shared.product import run_recipe, write_jsonl
    from tempering.config import DPOConfig
    from tempering.models.precision import resolve_precision
    from tempering.recipes.dpo import DPO

    clock, tokens = {}, {"n": 0}

    def timer(step: int, record: dict) -> None:
        if step == warmup:
            clock["t0"] = time.perf_counter()
        elif warmup < step <= warmup + steps:
            tokens["n"] += record["real_tokens"]
            clock["t1"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TEMPERING_CACHE"] = str(Path(tmp) / "cache")  # the model dir is resolved already
        cfg = DPOConfig.model_validate(
            {
                "model": model_dir,
                "lora": LORA,
                "out": tmp,
                "name": "bench-dpo",
                "data": {"train": [write_jsonl(Path(tmp) / "pairs.jsonl", pairs)], "max_length": 1024},
                "dpo": {"loss": "dpo", "beta": 0.1, "reference": "cache"},
                # one step more than timed: the final checkpoint save falls outside the timed steps
                "train": {
                    "steps": warmup + steps + 1,
                    "batch_size": batch,
                    "seed": 0,
                    "precision": "auto",
                    # the peer's threads: "auto" reads the load average, which lags after other work
                    "threads": torch.get_num_threads(),
                    "compile": compile_layers,
                    "optim": {"lr": 1e-5, "schedule": "constant"},
                    "checkpoint": {"every": 10_000, "keep_last": 1},
                },
            }
        )
        _, seen = run_recipe(DPO, cfg, [timer])
    precision = resolve_precision("auto")
    rendered = seen["data"].train
    reference_s = seen["components_s"]  # the model's load and the reference pass over every pair
    seconds = clock["t1"] - clock["t0"]
    pairs_per_s = steps * batch / seconds
    return {
        "pairs_per_s": pairs_per_s,
        "seconds": seconds,
        "pairs": steps * batch,
        "reference_s": reference_s,
        "epoch_pairs_per_s": len(rendered) / (len(rendered) / pairs_per_s + reference_s),
        "tokens_run": tokens["n"],
        "settings": {
            "precision": precision,
            "reference": "cached (adapters off)",
            "shared_prompt_forward": True,
            "compile": compile_layers,
            "torch_threads": torch.get_num_threads(),
        },
        "peak_rss_mb": peak_rss_mb(),
    }


def run_trl(model_dir: str, pairs: list[dict], batch: int, steps: int, warmup: int, precompute: bool) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    from tempering.models.precision import resolve_precision

    precision = resolve_precision("auto")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    peft = LoraConfig(
        r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    clock = {}

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == warmup:
                clock["t0"] = time.perf_counter()
            elif state.global_step > warmup:
                clock["t1"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(
            output_dir=out,
            per_device_train_batch_size=batch,
            max_steps=warmup + steps,
            learning_rate=1e-5,
            lr_scheduler_type="constant",
            beta=0.1,
            loss_type=["sigmoid"],
            bf16=precision == "bf16",
            use_cpu=True,
            report_to=[],
            logging_steps=10_000,
            save_strategy="no",
            gradient_checkpointing=False,
            max_length=1024,
            precompute_ref_log_probs=precompute,
            dataloader_num_workers=0,
            dataloader_pin_memory=False,
            disable_tqdm=True,
            seed=0,
        )
        t0 = time.perf_counter()
        trainer = DPOTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(pairs),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[Timer()],
        )
        setup_s = time.perf_counter() - t0  # tokenisation (+ the reference pass when precomputing)
        trainer.train()
    seconds = clock["t1"] - clock["t0"]
    pairs_per_s = steps * batch / seconds
    out = {
        "pairs_per_s": pairs_per_s,
        "seconds": seconds,
        "pairs": steps * batch,
        "setup_s": setup_s,
        "settings": {
            "precision": precision,
            "precompute_ref_log_probs": precompute,
            "lora": LORA,
            "torch_threads": torch.get_num_threads(),
        },
        "peak_rss_mb": peak_rss_mb(),
    }
    if precompute:
        out["epoch_pairs_per_s"] = len(pairs) / (len(pairs) / pairs_per_s + setup_s)
    return out


SIDES = ("tempering", "tempering_compiled", "trl", "trl_precompute")
QUICK = {"steps": 1, "warmup": 1, "batch": 2, "pairs": 8, "rounds": 1, "warmup_rounds": 0}
"""`--quick`: the smallest run that goes through every part (a smoke check, never a headline)."""


def run_child_side(side: str, pairs: int, batch: int, steps: int, warmup: int, threads: int) -> dict:
    """One side's timed steps (in the fresh process `harness.call_in_subprocess` starts)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from tempering.models.load import resolve_model

    common = (resolve_model("smollm2-135m-instruct"), make_pairs(pairs), batch, steps, warmup)
    if side.startswith("tempering"):
        return run_tempering(*common, compile_layers=side == "tempering_compiled")
    return run_trl(*common, precompute=side == "trl_precompute")


def run_side(side: str, args: argparse.Namespace) -> dict:
    """One side in its own process; a failure (exit status, time-out) is recorded, not raised."""
    kwargs = {"side": side, "pairs": args.pairs, "batch": args.batch, "steps": args.steps}
    kwargs |= {"warmup": args.warmup, "threads": args.threads}
    try:
        return harness.call_in_subprocess(Path(__file__), "run_child_side", kwargs, timeout_s=args.side_timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"failed": str(exc)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--sides", default=",".join(SIDES), help="tempering and at least one trl side")
    p.add_argument("--side-timeout", type=float, default=1800, help="seconds one side's process may run")
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads per side (the peers' count; 0: torch's default). On a "
        "host shared with other work, 1 avoids OpenMP oversubscription stalls.",
    )
    p.add_argument("--note", default="", help="What else was running (recorded in the JSON).")
    p.add_argument("--results", type=Path, default=RESULTS / "dpo.json")
    p.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    harness.add_round_arguments(p)
    args = p.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    sides = args.sides.split(",")
    if "tempering" not in sides or not {"trl", "trl_precompute"} & set(sides) or set(sides) - set(SIDES):
        p.error(f"--sides needs tempering and a trl side, from {', '.join(SIDES)}; got {args.sides!r}")
    return args


def main() -> None:
    args = parse_args()
    import torch

    from tempering.models.precision import resolve_precision

    sides = args.sides.split(",")
    records = harness.interleave(
        {n: (lambda n=n: run_side(n, args)) for n in sides}, rounds=args.rounds, warmup=args.warmup_rounds
    )
    runs = {n: harness.side_summary(records, n, "pairs_per_s") for n in sides}
    ran = {n: r for n, r in runs.items() if "pairs_per_s" in r}
    if "tempering" not in ran or not any(n.startswith("trl") for n in ran):
        sys.exit(f"no ratio: tempering and a trl side must run; ran: {list(ran)}")
    best_trl = max((n for n in ran if n.startswith("trl")), key=lambda n: ran[n]["pairs_per_s"])
    peer = ran[best_trl]["pairs_per_s"]
    result = {
        "model": "smollm2-135m-instruct (LoRA r16 all-linear)",
        "batch_pairs": args.batch,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "pairs_in_set": args.pairs,
        "precision": resolve_precision("auto"),
        "best_trl_setting": best_trl,
        # ratios of the sides' medians; the headline ratio_median / ratio_ci pair rounds
        "ratio_pairs_per_s_compiled": ran["tempering_compiled"]["pairs_per_s"] / peer
        if "tempering_compiled" in ran
        else None,
        "ratio_vs_trl_default": ran["tempering"]["pairs_per_s"] / ran["trl"]["pairs_per_s"] if "trl" in ran else None,
        "ratio_epoch_vs_trl_precompute": (
            median(r["epoch_pairs_per_s"] for r in _timed(records, "tempering"))
            / median(r["epoch_pairs_per_s"] for r in _timed(records, "trl_precompute"))
            if "trl_precompute" in ran
            else None
        ),
        "target_ratio": 2.0,
        "runs": runs,
        "other_activity": args.note,
    }
    written = harness.write_result(
        args.results,
        benchmark="dpo",
        host=harness.host(result["precision"], args.threads or torch.get_num_threads()),
        rounds=records,
        candidate="tempering",
        baseline=best_trl,
        metric="pairs_per_s",
        max_load=args.max_load,
        extra=result,
    )
    print_table(written)


def _timed(records: list[dict], side: str) -> list[dict]:
    return [r["result"] for r in records if r["side"] == side and not r["warmup"] and "pairs_per_s" in r["result"]]


def print_table(result: dict) -> None:
    print(f"\nDPO throughput, {result['batch_pairs']} pairs/step, precision {result['precision']}, medians of rounds")
    print(f"{'':18}{'pairs/s':>10}{'epoch pairs/s':>15}{'peak RSS MB':>13}")
    for name, r in result["runs"].items():
        if "pairs_per_s" not in r:
            print(f"{name:18}failed: {r['failed']}")
            continue
        epoch = f"{r['epoch_pairs_per_s']:15.3f}" if "epoch_pairs_per_s" in r else f"{'-':>15}"
        print(f"{name:18}{r['pairs_per_s']:10.3f}{epoch}{r['peak_rss_mb']:13.0f}")
    low, high = result["ratio_ci"]
    print(
        f"ratio tempering / {result['baseline']}: median {result['ratio_median']:.2f}x [{low:.2f}, {high:.2f}]"
        f"{' (parity)' if result['parity'] else ''} (target 2.0x); compiled {result['ratio_pairs_per_s_compiled']}; "
        f"vs TRL default {result['ratio_vs_trl_default']}; one epoch incl. precompute vs TRL precompute "
        f"{result['ratio_epoch_vs_trl_precompute']}"
    )


if __name__ == "__main__":
    main()
