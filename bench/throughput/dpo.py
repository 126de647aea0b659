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

    flock /work/wt/bench.lock python bench/throughput/dpo.py [--steps 3] [--warmup 1] [--batch 8] [--pairs 64]

Writes bench/results/dpo.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402

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


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from tempering.models.load import resolve_model

    model_dir = resolve_model("smollm2-135m-instruct")
    pairs = make_pairs(args.pairs)
    common = (model_dir, pairs, args.batch, args.steps, args.warmup)
    if args.child.startswith("tempering"):
        result = run_tempering(*common, compile_layers=args.child == "tempering_compiled")
    else:
        result = run_trl(*common, precompute=args.child == "trl_precompute")
    Path(args.out).write_text(json.dumps(result, default=str))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--child", choices=["tempering", "tempering_compiled", "trl", "trl_precompute"])
    p.add_argument("--out")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per child (0: torch's default). On a "
        "host shared with other work, 1 avoids OpenMP oversubscription stalls.",
    )
    p.add_argument("--note", default="", help="What else was running (recorded in the JSON).")
    args = p.parse_args()
    if args.child:
        return child(args)
    from tempering.models.precision import resolve_precision

    runs, load = {}, os.getloadavg()
    for name in ("tempering", "tempering_compiled", "trl", "trl_precompute"):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                name,
                "--out",
                out.name,
                f"--steps={args.steps}",
                f"--warmup={args.warmup}",
                f"--batch={args.batch}",
                f"--pairs={args.pairs}",
                f"--threads={args.threads}",
            ]
            print(f"running {name} ...", flush=True)
            subprocess.run(cmd, check=True)
            runs[name] = json.loads(Path(out.name).read_text())
    best_trl = max(("trl", "trl_precompute"), key=lambda n: runs[n]["pairs_per_s"])
    ratio = runs["tempering"]["pairs_per_s"] / runs[best_trl]["pairs_per_s"]
    ratio_compiled = runs["tempering_compiled"]["pairs_per_s"] / runs[best_trl]["pairs_per_s"]
    result = {
        "benchmark": "dpo",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": "smollm2-135m-instruct (LoRA r16 all-linear)",
        "batch_pairs": args.batch,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "pairs_in_set": args.pairs,
        "precision": resolve_precision("auto"),
        "cpu": cpu_name(),
        "ratio_pairs_per_s": ratio,
        "ratio_pairs_per_s_compiled": ratio_compiled,
        "best_trl_setting": best_trl,
        "ratio_vs_trl_default": runs["tempering"]["pairs_per_s"] / runs["trl"]["pairs_per_s"],
        "ratio_epoch_vs_trl_precompute": runs["tempering"]["epoch_pairs_per_s"]
        / runs["trl_precompute"]["epoch_pairs_per_s"],
        "target_ratio": 2.0,
        "runs": runs,
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
        "other_activity": args.note,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dpo.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"\nDPO throughput, {args.batch} pairs/step, precision {result['precision']}")
    print(f"{'':18}{'pairs/s':>10}{'epoch pairs/s':>15}{'peak RSS MB':>13}")
    for name, r in runs.items():
        epoch = f"{r['epoch_pairs_per_s']:15.3f}" if "epoch_pairs_per_s" in r else f"{'-':>15}"
        print(f"{name:18}{r['pairs_per_s']:10.3f}{epoch}{r['peak_rss_mb']:13.0f}")
    print(
        f"ratio tempering / {best_trl}: {ratio:.2f}x (with compiled layers {ratio_compiled:.2f}x; target 2.0x); vs TRL default "
        f"{result['ratio_vs_trl_default']:.2f}x; one epoch incl. precompute vs TRL precompute "
        f"{result['ratio_epoch_vs_trl_precompute']:.2f}x"
    )


if __name__ == "__main__":
    main()
