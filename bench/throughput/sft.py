"""SFT throughput: Tempering vs TRL's SFTTrainer, side by side in one benchmark run.

Same model (the default, full parameters), same conversations, same max length and batch,
same precision ("auto": bf16 autocast where the CPU has native bf16, else fp32 -- on an
AVX2-only CPU emulated bf16 is ~100x slower than fp32 and would measure nothing useful).
Each framework runs in its own child process, one after the other, so peak RSS is its own
and neither competes for the 2 cores. Both report *real* (non-pad) tokens per second over
the timed steps after warm-up; MFU is model FLOPs (6N + attention, bench/_shared/peak.py) per
second against matmul peaks measured in this same run.

    python bench/throughput/sft.py [--steps 4] [--warmup 2] [--batch 8] [--max-length 512] [--examples 96]
        [--tokens-per-step N] [--model DIR] [--sides tempering,trl,...] [--results FILE]

`--max-length` is the row length: Tempering packs each batch's conversations into rows of at most
that many tokens (data.max_length) and TRL's padding-free collator flattens the same conversations
(bench conversations are 60-500 tokens, so a 4,096-token row holds ~18 of them). `--tokens-per-step`
sets the batch instead of `--batch`: as many conversations as hold that many tokens on average
(the same for every side), with enough examples for every step.

Sides (each its own child process, each outcome recorded; a side that fails -- out of memory, say
-- is recorded with its output's tail and the others still run; one that needs a package or a GPU
this machine lacks is recorded as skipped with the reason):
* `tempering`, `tempering_ckpt` (train.gradient_checkpointing on), `tempering_compiled` (train.compile);
* TRL at its defaults (`trl`: padding-free, SDPA, no checkpointing) and, each as its own side with
  its settings recorded (`TRL_SIDE_SETTINGS`): `trl_compiled` (torch_compile), `trl_packing` (bfd),
  `trl_padded` (padding_free off), `trl_ckpt` (gradient checkpointing), `trl_flex` (flex attention,
  varlen by block mask), `trl_flash` (FlashAttention 2 varlen, when `flash_attn` imports), `trl_liger`
  (Liger kernels, when `liger_kernel` imports). The headline compares the fastest of each framework.

Rounds (bench/_shared/harness.py): every side runs once a round, in a fresh process, the sides in
the order given, `--warmup-rounds` rounds first and not counted, then `--rounds` timed rounds. A
side's figure is the median of its rounds; the headline is the fastest Tempering side over the
fastest TRL side (by median), paired by round, with a bootstrap interval of the median ratio.
MFU is against the peak of the precision the sides ran (`mfu_*_vs_peak_of_precision_used`); the
`*_vs_bf16_peak` columns only where the CPU has native bf16 (else null: an emulated bf16 peak is a
few GFLOP/s and divides into nonsense). `--quick` is a smoke run: tiny steps, one round, not a headline.

Writes bench/results/sft.json (or --results) and prints a table.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared import harness  # noqa: E402
from _shared.paths import RESULTS  # noqa: E402

# Each side's settings over its framework's defaults; every one is recorded in the result.
TEMPERING_SIDE_SETTINGS: dict[str, dict] = {
    "tempering": {},
    "tempering_ckpt": {"gradient_checkpointing": True},
    "tempering_compiled": {"compile": True},
}
TRL_SIDE_SETTINGS: dict[str, dict] = {
    "trl": {},
    "trl_compiled": {"torch_compile": True},
    "trl_packing": {"packing": True, "packing_strategy": "bfd"},
    "trl_padded": {"padding_free": False},
    "trl_ckpt": {"gradient_checkpointing": True},
    "trl_flex": {"attn_implementation": "flex_attention"},
    "trl_flash": {"attn_implementation": "flash_attention_2"},
    "trl_liger": {"use_liger_kernel": True},
}
SIDES = (*TEMPERING_SIDE_SETTINGS, *TRL_SIDE_SETTINGS)
# What a side needs beyond the bench's own packages: a module that must import, or a CUDA GPU.
SIDE_NEEDS: dict[str, tuple[str, ...]] = {
    "trl_flex": ("cuda",),  # flex attention's kernels compile for minutes on a CPU
    "trl_flash": ("cuda", "flash_attn"),
    "trl_liger": ("cuda", "liger_kernel"),  # Triton kernels
}


def side_settings(side: str) -> dict:
    """The side's settings over its framework's defaults."""
    return TEMPERING_SIDE_SETTINGS[side] if side in TEMPERING_SIDE_SETTINGS else TRL_SIDE_SETTINGS[side]


def missing_need(side: str) -> str | None:
    """Why `side` cannot run here (None: it can)."""
    import importlib.util

    import torch

    for need in SIDE_NEEDS.get(side, ()):
        if need == "cuda" and not torch.cuda.is_available():
            return "needs a CUDA GPU"
        if need != "cuda" and importlib.util.find_spec(need) is None:
            return f"{need} is not installed"
    return None


def batch_for_tokens(lengths: list[int], tokens_per_step: int) -> int:
    """Conversations per step that hold `tokens_per_step` tokens at the mean rendered length."""
    return max(1, round(tokens_per_step * len(lengths) / sum(lengths)))


def run_tempering(
    model_dir: str,
    conversations: list[dict],
    max_length: int,
    batch: int,
    steps: int,
    warmup: int,
    settings: dict | None = None,
) -> dict:
    """Tempering's SFT path, as `temper sft` runs it (`recipes.sft.SFT` through `run_training`, on
    the conversations written as the config's data file), timing steps warmup+1 .. warmup+steps.
    `settings`: `train` keys of the side (compile, gradient_checkpointing)."""
    import torch

    from _shared.product import Stop, run_recipe, write_jsonl
    from tempering.config import SFTConfig
    from tempering.models.precision import resolve_precision
    from tempering.recipes.sft import SFT
    from tempering.types import IGNORE

    clock, tokens = {}, {"real": 0}

    def timer(step: int, record: dict) -> None:
        if step == warmup:
            clock["t0"] = time.perf_counter()
        elif warmup < step <= warmup + steps:
            tokens["real"] += record["real_tokens"]
            if step == warmup + steps:
                clock["t1"] = time.perf_counter()
                raise Stop  # the run's final save (a 1B model's weights and optimizer: seconds) is not timed

    with tempfile.TemporaryDirectory() as tmp:
        cfg = SFTConfig.model_validate(
            {
                "model": model_dir,
                "lora": None,
                "out": tmp,
                "name": "bench-sft",
                "data": {
                    "train": [write_jsonl(Path(tmp) / "conversations.jsonl", conversations)],
                    "max_length": max_length,
                    "packing": True,
                },
                "train": {
                    # one step more than timed: the timer stops the run before the final save
                    "steps": warmup + steps + 1,
                    "batch_size": batch,
                    "precision": "auto",
                    # the peer's threads: "auto" reads the load average, which lags after other work
                    "threads": torch.get_num_threads(),
                    **(settings or {}),
                    "optim": {"lr": 1e-5, "schedule": "constant"},
                    "checkpoint": {"every": 10_000, "keep_last": 1},
                },
            }
        )
        _, seen = run_recipe(SFT, cfg, [timer])
    examples, excluded = seen["data"].train, len(seen["data"].errors)
    targets = sum(sum(1 for x in e.labels[1:] if x != IGNORE) for e in examples)
    seconds = clock["t1"] - clock["t0"]
    return {
        "real_tokens": tokens["real"],
        "seconds": seconds,
        "real_tokens_per_s": tokens["real"] / seconds,
        "loss": "assistant_only",
        "settings": {
            "packing": True,
            "precision": resolve_precision("auto"),
            "head_on_targets_only": True,
            "compile": bool((settings or {}).get("compile")),
            "gradient_checkpointing": bool((settings or {}).get("gradient_checkpointing")),
            "torch_threads": torch.get_num_threads(),
        },
        "excluded_over_max_length": excluded,
        # the LM head runs on target positions only: its share of executed FLOPs (the data's fraction)
        "head_token_fraction": targets / sum(len(e.input_ids) for e in examples),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_trl(
    model_dir: str, conversations: list[dict], max_length: int, batch: int, steps: int, warmup: int, extra: dict
) -> dict:
    from _shared.trl_peer import run_trl_sft

    # TRL's defaults as trl_peer.DEFAULT_SETTINGS (padding-free, no gradient checkpointing) with the
    # same assistant-only objective as Tempering, plus the side's own option (compile, packing).
    result = run_trl_sft(
        model_dir,
        conversations,
        max_length,
        batch,
        steps,
        warmup_steps=warmup,
        settings={"assistant_only_loss": True, **extra},
    )
    return {**result, "head_token_fraction": 1.0}  # TRL computes the logits of every position


def run_child_side(side: str, model: str, examples: int, max_length: int, batch: int, steps: int, warmup: int) -> dict:
    """One side's timed steps (in the fresh process `harness.call_in_subprocess` starts)."""
    from _shared.sft_data import make_bench_conversations
    from tempering.models.load import resolve_model

    model_dir = resolve_model(model)
    common = (model_dir, make_bench_conversations(examples, seed=0), max_length, batch, steps, warmup)
    if side in TRL_SIDE_SETTINGS:
        return run_trl(*common, TRL_SIDE_SETTINGS[side])
    return run_tempering(*common, settings=TEMPERING_SIDE_SETTINGS[side])


def run_side(name: str, args: argparse.Namespace, batch: int) -> dict:
    """One side in its own child process; its result, or why it was skipped or failed."""
    reason = missing_need(name)
    if reason:
        return {"skipped": reason}
    settings = side_settings(name)
    kwargs = {"side": name, "model": args.model, "examples": args.examples, "max_length": args.max_length}
    kwargs |= {"batch": batch, "steps": args.steps, "warmup": args.warmup}
    try:
        result = harness.call_in_subprocess(Path(__file__), "run_child_side", kwargs, timeout_s=args.side_timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:  # out of memory, say: recorded, the other sides still run
        return {"failed": str(exc), "settings": settings}
    return {**result, "side_settings": settings}


def flops_model(model_spec: str):
    """The model's modules on the meta device (no weights): enough to count its FLOPs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tempering.models.load import resolve_model

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(resolve_model(model_spec)))


def add_mfu(r: dict, flops_per_token: float, head_flops: float, used_peak: float, bf16_peak: float | None) -> None:
    """MFU of a side's tokens/s: model FLOPs (6N + attention) and the FLOPs actually executed (the
    head only on the positions it runs on), against the peak of the precision used and, where the
    CPU has native bf16 (`bf16_peak` not None), the bf16 peak."""
    executed = flops_per_token - head_flops * (1.0 - r.get("head_token_fraction", 1.0))
    r["executed_flops_per_token"] = executed
    r["mfu_vs_peak_of_precision_used"] = r["real_tokens_per_s"] * flops_per_token / used_peak
    r["mfu_executed_vs_peak_of_precision_used"] = r["real_tokens_per_s"] * executed / used_peak
    r["mfu_vs_bf16_peak"] = r["real_tokens_per_s"] * flops_per_token / bf16_peak if bf16_peak else None
    r["mfu_executed_vs_bf16_peak"] = r["real_tokens_per_s"] * executed / bf16_peak if bf16_peak else None


QUICK = {"steps": 1, "warmup": 1, "batch": 2, "max_length": 256, "examples": 8, "peak_seconds": 0.2}
"""`--quick`: the smallest run that goes through every part (a smoke check, never a headline)."""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="conversations per step (see --tokens-per-step)")
    p.add_argument("--max-length", type=int, default=512, help="the row length (and the longest conversation)")
    p.add_argument("--tokens-per-step", type=int, default=None, help="set the batch to hold this many tokens")
    p.add_argument("--examples", type=int, default=96)
    p.add_argument("--model", default="smollm2-135m-instruct", help="alias or model directory")
    p.add_argument("--sides", default="tempering,tempering_compiled,trl,trl_compiled,trl_packing")
    p.add_argument("--peak-seconds", type=float, default=3.0)
    p.add_argument("--side-timeout", type=float, default=1800, help="seconds one side's process may run")
    p.add_argument("--results", type=Path, default=RESULTS / "sft.json")
    p.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}, 1 round, no warm-up round")
    harness.add_round_arguments(p)
    args = p.parse_args()
    if args.quick:
        vars(args).update(QUICK, rounds=1, warmup_rounds=0)
    sides = args.sides.split(",")
    if (
        not set(sides) & set(TRL_SIDE_SETTINGS)
        or not set(sides) & set(TEMPERING_SIDE_SETTINGS)
        or set(sides) - set(SIDES)
    ):
        p.error(f"--sides needs a trl and a tempering side, from {', '.join(SIDES)}; got {args.sides!r}")
    return args


def main() -> None:
    args = parse_args()
    import torch

    from _shared.peak import measure_bf16_matmul_peak, model_flops_per_token
    from _shared.sft_data import make_bench_conversations
    from tempering.models.load import load_tokenizer
    from tempering.models.precision import resolve_precision

    sides = args.sides.split(",")
    tok = load_tokenizer(args.model)

    def rendered(n: int) -> list[int]:
        return [
            len(tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True)["input_ids"])
            for c in make_bench_conversations(n, seed=0)
        ]

    lengths = rendered(args.examples)
    if args.tokens_per_step:
        args.batch = batch_for_tokens(lengths, args.tokens_per_step)
        args.examples = max(args.examples, args.batch * (args.warmup + args.steps + 1))
        lengths = rendered(args.examples)
    # TRL's bfd packing fills rows to the row length: as many rows as hold the same tokens per step
    packed_rows = max(1, round(args.batch * sum(lengths) / len(lengths) / args.max_length))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = resolve_precision("auto")
    # Without native bf16 (no AMX / AVX512-BF16) bf16 is emulated at a few GFLOP/s: no bf16 peak,
    # and MFU is against the fp32 peak the sides ran at.
    bf16_peak = measure_bf16_matmul_peak(args.peak_seconds, device=device) if precision == "bf16" else None
    fp32_peak = measure_bf16_matmul_peak(args.peak_seconds, dtype=torch.float32, device=device)
    if device == "cuda":
        torch.cuda.empty_cache()  # the sides' processes get the memory the peak's matrices held
    model = flops_model(args.model)
    doc_len = sum(n * n for n in lengths) / sum(lengths)  # token-weighted attention span
    flops_per_token = model_flops_per_token(model, seq_len=doc_len)
    used_peak = bf16_peak or fp32_peak
    head_flops = 6.0 * model.get_output_embeddings().weight.numel()  # per token the head runs on
    result = {
        "model": f"{args.model} (full params)",
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "batch": args.batch,
        "max_length": args.max_length,
        "tokens_per_step_asked": args.tokens_per_step,
        "mean_conversation_tokens": sum(lengths) / len(lengths),
        "trl_packing_rows_per_step": packed_rows,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "examples": args.examples,
        "precision": precision,
        "native_bf16": precision == "bf16",
        "bf16_matmul_peak_gflops": bf16_peak / 1e9 if bf16_peak else None,
        "peak_device": device,
        "fp32_matmul_peak_gflops": fp32_peak / 1e9,
        "model_flops_per_token": flops_per_token,
        "side_settings": {n: side_settings(n) for n in sides},
        "mfu_note": (
            "mfu_vs_* counts 6N (+ attention) per real token, the LM head included; mfu_executed_vs_* "
            "counts the head only on the positions it runs on (Tempering: target tokens, head_token_fraction; "
            "TRL: every position); *_bf16_peak only where the CPU has native bf16"
        ),
        "target_ratio": 2.4,
    }
    runnable = {n: None for n in sides if not missing_need(n)}
    not_run = {n: {"skipped": missing_need(n)} for n in sides if n not in runnable}
    batch_of = {n: packed_rows if n == "trl_packing" else args.batch for n in runnable}
    records = harness.interleave(
        {n: (lambda n=n: run_side(n, args, batch_of[n])) for n in runnable},
        rounds=args.rounds,
        warmup=args.warmup_rounds,
    )
    runs = {}
    for name in runnable:
        summary = harness.side_summary(records, name, "real_tokens_per_s")
        if "real_tokens_per_s" in summary:
            add_mfu(summary, flops_per_token, head_flops, used_peak, bf16_peak)
            runs[name] = summary
        else:
            not_run[name] = summary
    best = headline(runs)
    if not best:
        sys.exit(f"no ratio: needs a tempering and a trl side that ran; not run: {list(not_run)}")
    result |= {**best, "runs": runs, "not_run": not_run}
    written = harness.write_result(
        args.results,
        benchmark="sft",
        host=harness.host(precision, torch.get_num_threads()),
        rounds=records,
        candidate=best["best_tempering_setting"],
        baseline=best["best_trl_setting"],
        metric="real_tokens_per_s",
        max_load=args.max_load,
        extra=result,
    )
    print_table(written)


def headline(runs: dict[str, dict]) -> dict:
    """Tempering's best side vs TRL's best side (every side is reported); {} until both ran."""
    ours = [n for n in runs if n in TEMPERING_SIDE_SETTINGS]
    theirs = [n for n in runs if n in TRL_SIDE_SETTINGS]
    if not ours or not theirs:
        return {}
    best = max(ours, key=lambda n: runs[n]["real_tokens_per_s"])
    best_trl = max(theirs, key=lambda n: runs[n]["real_tokens_per_s"])
    peer = runs[best_trl]["real_tokens_per_s"]
    return {
        "ratio_real_tokens_per_s": runs[best]["real_tokens_per_s"] / peer,
        "best_tempering_setting": best,
        "best_trl_setting": best_trl,
        "ratios_by_setting": {n: runs[n]["real_tokens_per_s"] / peer for n in ours},
    }


def _pct(value: float | None, width: int) -> str:
    return f"{value:{width}.1%}" if value is not None else f"{'n/a':>{width}}"


def print_table(result: dict) -> None:
    """The sides' median figures; MFU against the peak of the precision used (bf16 only where native)."""
    bf16 = result["bf16_matmul_peak_gflops"]
    print(
        f"\nSFT throughput, batch {result['batch']}, row length {result['max_length']}, precision "
        f"{result['precision']}, peaks bf16 {f'{bf16:.1f}' if bf16 else 'n/a (not native)'} / fp32 "
        f"{result['fp32_matmul_peak_gflops']:.1f} GFLOP/s, {result['paired_rounds']} rounds"
    )
    print(f"{'':20}{'real tok/s':>12}{'MFU(used)':>11}{'MFU(bf16)':>11}{'executed':>10}{'peak RSS MB':>13}")
    for name, r in result["runs"].items():
        print(
            f"{name:20}{r['real_tokens_per_s']:12.1f}{_pct(r['mfu_vs_peak_of_precision_used'], 11)}"
            f"{_pct(r['mfu_vs_bf16_peak'], 11)}{_pct(r['mfu_executed_vs_peak_of_precision_used'], 10)}"
            f"{r['peak_rss_mb']:13.0f}"
        )
    for name, r in result["not_run"].items():
        print(f"{name:20}{'skipped: ' + r['skipped'] if 'skipped' in r else 'failed: ' + r['failed']}")
    low, high = result["ratio_ci"]
    print(
        f"ratio tempering ({result['candidate']}) / trl ({result['baseline']}): median {result['ratio_median']:.2f}x "
        f"[{low:.2f}, {high:.2f}]{' (parity)' if result['parity'] else ''} (target 2.4x); by setting, of medians: "
        + ", ".join(f"{n} {r:.2f}x" for n, r in result["ratios_by_setting"].items())
    )


if __name__ == "__main__":
    main()
