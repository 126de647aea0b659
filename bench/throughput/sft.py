"""SFT throughput: Tempering vs TRL's SFTTrainer, side by side in one benchmark run.

Same model (the default, full parameters), same conversations, same max length and batch,
same precision ("auto": bf16 autocast where the CPU has native bf16, else fp32 -- on an
AVX2-only CPU emulated bf16 is ~100x slower than fp32 and would measure nothing useful).
Each framework runs in its own child process, one after the other, so peak RSS is its own
and neither competes for the 2 cores. Both report *real* (non-pad) tokens per second over
the timed steps after warm-up; MFU is model FLOPs (6N + attention, bench/_shared/peak.py) per
second against matmul peaks measured in this same run.

    python bench/throughput/sft.py [--steps 4] [--warmup 2] [--batch 8] [--max-length 512] [--examples 96]
        [--model DIR] [--sides tempering,tempering_compiled,trl,trl_compiled,trl_packing] [--results FILE]

TRL runs at its defaults (padding-free, no checkpointing) and, as its own sides, with its
`torch_compile` on and with packing (bfd); the headline compares the fastest of each.

On a GPU every side trains on it (Tempering's Trainer and TRL both take the GPU when there is
one) and the peak is the GPU's bf16 matmul. `--model` takes any model directory, e.g. a
random-weight shape from bench/_shared/model_shapes.py (bench/gpu/run.sh does this).

Writes bench/results/sft.json (or --results) and prints a table.
"""

from __future__ import annotations

import argparse
import json
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
from _shared.paths import RESULTS, cpu_name  # noqa: E402

SIDES = ("tempering", "tempering_compiled", "trl", "trl_compiled", "trl_packing")
# TRL's options that could make it faster on this CPU, each its own side (the headline takes TRL's fastest)
TRL_SIDE_SETTINGS = {
    "trl": {},
    "trl_compiled": {"torch_compile": True},
    "trl_packing": {"packing": True, "packing_strategy": "bfd"},
}


def run_tempering(
    model_dir: str,
    conversations: list[dict],
    max_length: int,
    batch: int,
    steps: int,
    warmup: int,
    compile_layers: bool = False,
) -> dict:
    """Tempering's SFT path (render -> pack -> Trainer), timing steps warmup+1 .. warmup+steps."""
    import torch

    from tempering.config import SFTConfig
    from tempering.data.io import LoadResult, Record
    from tempering.data.padding import pad_id
    from tempering.data.render import detect_tool_call_style, render_records
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training
    from tempering.models.precision import resolve_precision
    from tempering.recipes.sft import SFTData, sft_components
    from tempering.train.trainer import Trainer
    from tempering.types import IGNORE, Conversation

    tokenizer = load_tokenizer(model_dir)
    loaded = LoadResult(
        records=[Record(Conversation.model_validate(c), "bench", f"row {i}") for i, c in enumerate(conversations, 1)],
        rows=len(conversations),
    )
    examples = render_records(loaded, tokenizer, detect_tool_call_style(tokenizer), max_length)
    cfg = SFTConfig.model_validate(
        {
            "model": model_dir,
            "lora": None,
            "data": {"train": ["<bench conversations>"], "max_length": max_length, "packing": True},
            "train": {
                "steps": warmup + steps + 1,
                "batch_size": batch,
                "precision": "auto",
                # the peer's threads: "auto" reads the load average, which lags after other work
                "threads": torch.get_num_threads(),
                "compile": compile_layers,
                "optim": {"lr": 1e-5, "schedule": "constant"},
                "checkpoint": {"every": 10_000, "keep_last": 1},
            },
        }
    )
    targets = sum(sum(1 for x in e.labels[1:] if x != IGNORE) for e in examples)
    model = load_for_training(model_dir, None)
    batches, _, objective = sft_components(
        cfg.train, cfg.data, SFTData(examples, [], {}, list(loaded.errors)), pad_id(tokenizer)
    )
    settings = cfg.train
    clock, tokens = {}, {"real": 0}

    def timer(step: int, record: dict) -> None:
        if step == warmup:
            clock["t0"] = time.perf_counter()
        elif warmup < step <= warmup + steps:
            tokens["real"] += record["real_tokens"]
            if step == warmup + steps:
                clock["t1"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as run_dir:
        Trainer(model, objective, batches, settings, Path(run_dir), callbacks=[timer]).fit()
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
            "compile": compile_layers,
            "torch_threads": torch.get_num_threads(),
        },
        "excluded_over_max_length": len(loaded.errors),
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


def child(args: argparse.Namespace) -> None:
    from _shared.sft_data import make_bench_conversations
    from tempering.models.load import resolve_model

    model_dir = resolve_model(args.model)
    conversations = make_bench_conversations(args.examples, seed=0)
    common = (model_dir, conversations, args.max_length, args.batch, args.steps, args.warmup)
    if args.child in TRL_SIDE_SETTINGS:
        result = run_trl(*common, TRL_SIDE_SETTINGS[args.child])
    else:
        result = run_tempering(*common, compile_layers=args.child == "tempering_compiled")
    Path(args.out).write_text(json.dumps(result, default=str))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--examples", type=int, default=96)
    p.add_argument("--model", default="smollm2-135m-instruct", help="alias or model directory")
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated, from " + ", ".join(SIDES))
    p.add_argument("--peak-seconds", type=float, default=3.0)
    p.add_argument("--results", type=Path, default=RESULTS / "sft.json")
    p.add_argument("--child", choices=SIDES)
    p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        return child(args)

    import torch

    from _shared.peak import measure_bf16_matmul_peak, model_flops_per_token
    from _shared.sft_data import make_bench_conversations
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import resolve_precision

    sides = args.sides.split(",")
    if (
        not set(sides) & set(TRL_SIDE_SETTINGS)
        or not set(sides) & {"tempering", "tempering_compiled"}
        or set(sides) - set(SIDES)
    ):
        p.error(f"--sides needs a trl and a tempering side, from {', '.join(SIDES)}; got {args.sides!r}")
    runs = {}
    for name in sides:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, __file__, "--child", name, "--out", out.name] + [
                f"--{k.replace('_', '-')}={v}"
                for k, v in vars(args).items()
                if k not in ("child", "out", "sides", "results")
            ]
            print(f"running {name} ...", flush=True)
            subprocess.run(cmd, check=True)
            runs[name] = json.loads(Path(out.name).read_text())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16_peak = measure_bf16_matmul_peak(args.peak_seconds, device=device)
    fp32_peak = measure_bf16_matmul_peak(args.peak_seconds, dtype=torch.float32, device=device)
    model = load_model(args.model)
    tok = load_tokenizer(args.model)
    lengths = [
        len(tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True)["input_ids"])
        for c in make_bench_conversations(args.examples, seed=0)
    ]
    doc_len = sum(n * n for n in lengths) / sum(lengths)  # token-weighted attention span
    flops_per_token = model_flops_per_token(model, seq_len=doc_len)
    precision = resolve_precision("auto")
    used_peak = bf16_peak if precision == "bf16" else fp32_peak
    head_flops = 6.0 * model.get_output_embeddings().weight.numel()  # per token the head runs on
    for r in runs.values():
        achieved = r["real_tokens_per_s"] * flops_per_token
        r["mfu_vs_bf16_peak"] = achieved / bf16_peak
        r["mfu_vs_peak_of_precision_used"] = achieved / used_peak
        # on the FLOPs actually executed: the head only on the positions it runs on
        executed = flops_per_token - head_flops * (1.0 - r.get("head_token_fraction", 1.0))
        r["executed_flops_per_token"] = executed
        r["mfu_executed_vs_bf16_peak"] = r["real_tokens_per_s"] * executed / bf16_peak
    # Headline: Tempering's best setting vs TRL's best setting; every setting is reported.
    ours = [n for n in sides if n not in TRL_SIDE_SETTINGS]
    theirs = [n for n in sides if n in TRL_SIDE_SETTINGS]
    best = max(ours, key=lambda n: runs[n]["real_tokens_per_s"])
    best_trl = max(theirs, key=lambda n: runs[n]["real_tokens_per_s"])
    ratio = runs[best]["real_tokens_per_s"] / runs[best_trl]["real_tokens_per_s"]
    ratios = {n: runs[n]["real_tokens_per_s"] / runs[best_trl]["real_tokens_per_s"] for n in ours}
    result = {
        "benchmark": "sft",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": f"{args.model} (full params)",
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "batch": args.batch,
        "max_length": args.max_length,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup,
        "examples": args.examples,
        "precision": precision,
        "cpu": cpu_name(),
        "native_bf16": precision == "bf16",
        "bf16_matmul_peak_gflops": bf16_peak / 1e9,
        "peak_device": device,
        "fp32_matmul_peak_gflops": fp32_peak / 1e9,
        "model_flops_per_token": flops_per_token,
        "ratio_real_tokens_per_s": ratio,
        "best_tempering_setting": best,
        "best_trl_setting": best_trl,
        "trl_side_settings": {n: TRL_SIDE_SETTINGS[n] for n in theirs},
        "mfu_note": (
            "mfu_vs_bf16_peak counts 6N (+ attention) per real token, the LM head included; "
            "mfu_executed_vs_bf16_peak counts the head only on the positions it runs on (Tempering: "
            "target tokens, head_token_fraction; TRL: every position)"
        ),
        "ratios_by_setting": ratios,
        "target_ratio": 2.4,
        "runs": runs,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=1, default=str))
    print(
        f"\nSFT throughput, batch {args.batch}, max length {args.max_length}, precision {precision}, "
        f"peaks bf16 {bf16_peak / 1e9:.1f} / fp32 {fp32_peak / 1e9:.1f} GFLOP/s"
    )
    print(f"{'':20}{'real tok/s':>12}{'MFU(used)':>11}{'MFU(bf16)':>11}{'executed':>10}{'peak RSS MB':>13}")
    for name, r in runs.items():
        # Against an emulated bf16 peak (no AMX/AVX512-BF16) the percentage means nothing.
        bf16_col = f"{r['mfu_vs_bf16_peak']:11.1%}" if precision == "bf16" else f"{'n/a':>11}"
        print(
            f"{name:20}{r['real_tokens_per_s']:12.1f}{r['mfu_vs_peak_of_precision_used']:11.1%}"
            f"{bf16_col}{r['mfu_executed_vs_bf16_peak']:10.1%}{r['peak_rss_mb']:13.0f}"
        )
    print(
        f"ratio tempering ({best}) / trl ({best_trl}): {ratio:.2f}x (target 2.4x); "
        + ", ".join(f"{n} {r:.2f}x" for n, r in ratios.items())
    )


if __name__ == "__main__":
    main()
