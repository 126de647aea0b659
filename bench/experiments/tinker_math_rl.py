"""tinker-cookbook's `math_rl` recipe (arithmetic environment) against `temper tinker serve` on
loopback, default model, with the recipe's default loss `stable_reinforce`.

Starts `temper tinker serve` (a subprocess on a free 127.0.0.1 port, its own state dir and a
key from `temper keys create`, used as printed), then runs the recipe's own entry point,
`tinker_cookbook.recipes.math_rl.train.cli_main`, unmodified, with its `CLIConfig` defaults
except:

  * offline: `model_name` is the default model's converted HF dir (what `smollm2-135m-instruct`
    resolves to), so the cookbook's `get_tokenizer` loads it without a hub; `renderer_name` is
    `qwen3_instruct` (ChatML, SmolLM2's own format; the recipe's lookup knows only Tinker's
    hosted models); `base_url` is the local server;
  * size: `groups_per_batch` (default 100 problems a step) and `max_steps`, so a few steps fit
    a small CPU host; `learning_rate` (the recipe's 1e-5 barely moves LoRA in a few steps).

`loss_fn` is left at the recipe's default and checked to be `stable_reinforce`. Writes, as the
`math_rl` section of `bench/results/tinker.json` (other sections kept): per step the recipe's
own reward, correct and format figures (its metrics.jsonl), the server's `loss:sum` of that
step's forward_backward (the training client's registry run), the step's grad norm and wall
time; the run's wall time; the host.

    python bench/experiments/tinker_math_rl.py [--steps 6 --groups 16 --lr 1e-4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402
from _shared.serving import free_port, start_tinker_server  # noqa: E402


def server_losses(state: Path, log: Path) -> list[float]:
    """`loss:sum` of each training forward_backward of the recipe's training client, from its
    registry run (the final checkpoint's `tinker://MODEL/...` path names it)."""
    from tempering.runs.registry import Registry

    final = [json.loads(line) for line in (log / "checkpoints.jsonl").read_text().splitlines()][-1]
    model_id = final["state_path"].removeprefix("tinker://").split("/")[0]
    run = Registry(state / "registry.sqlite").latest(f"tinker-{model_id}")
    if run is None:
        raise RuntimeError(f"no registry run for {model_id}")
    return run["metrics"]["losses"]


def main() -> None:
    parser = argparse.ArgumentParser(description="tinker-cookbook's math_rl recipe against temper tinker serve")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=16, help="groups_per_batch (the recipe's default: 100)")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning_rate (the recipe's default: 1e-5)")
    parser.add_argument("--renderer", default="qwen3_instruct")
    parser.add_argument("--out", type=Path, default=RESULTS / "tinker.json")
    args = parser.parse_args()

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TINKER_TELEMETRY="0")
    from tempering.models.load import resolve_model

    model_dir = resolve_model("smollm2-135m-instruct")
    work = Path(tempfile.mkdtemp(prefix="tinker_math_rl_"))
    (work / "state").mkdir()
    port = free_port()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a `timeout` still stops the server (finally)
    proc, key = start_tinker_server(work / "state", port, env)
    os.environ["TINKER_API_KEY"] = key
    try:
        from tinker_cookbook.recipes.math_rl import train

        config = train.CLIConfig(
            model_name=model_dir,
            renderer_name=args.renderer,
            base_url=f"http://127.0.0.1:{port}",
            log_path=str(work / "log"),
            groups_per_batch=args.groups,
            learning_rate=args.lr,
            max_steps=args.steps,
        )
        if config.loss_fn != "stable_reinforce":
            raise RuntimeError(f"the recipe's default loss is {config.loss_fn!r} now, not stable_reinforce")
        started = time.perf_counter()
        asyncio.run(train.cli_main(config))
        seconds = time.perf_counter() - started
        losses = server_losses(work / "state", work / "log")
    finally:
        proc.terminate()
        proc.wait(30)
    rows = [json.loads(line) for line in (work / "log" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "env/all/reward/total" in r]
    per_step = [
        {
            "step": r["progress/batch"],
            "reward": r["env/all/reward/total"],
            "correct": r["env/all/correct"],
            "format": r["env/all/format"],
            "loss_sum": loss,
            "grad_norm": r.get("grad_norm:mean"),
            "kl_sample_train": r["optim/kl_sample_train_v1"],
            "seconds": round(r["time/total"], 1),
        }
        for r, loss in zip(steps, losses, strict=True)
    ]
    section = {
        "what": "tinker-cookbook recipes/math_rl/train.py cli_main (arithmetic env) against temper tinker serve, loopback",
        "model": "smollm2-135m-instruct (LoRA)",
        "precision": "auto (server default)",
        "loss_fn": config.loss_fn,
        "settings": {
            "groups_per_batch": args.groups,
            "group_size": config.group_size,
            "learning_rate": args.lr,
            "lora_rank": config.lora_rank,
            "max_tokens": config.max_tokens,
            "renderer": args.renderer,
            "max_steps": args.steps,
        },
        "steps": len(per_step),
        "reward_first": per_step[0]["reward"],
        "reward_last": per_step[-1]["reward"],
        "per_step": per_step,
        "note": "reward/correct/format: the recipe's own per-step means over that step's problems (a new batch each step); "
        "loss_sum: the server's loss:sum of the step's stable_reinforce forward_backward",
        "seconds": round(seconds, 1),
        "seconds_per_step": round(seconds / max(1, len(per_step)), 1),
        "cpu": cpu_name(),
        "threads": os.cpu_count(),
    }
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result["math_rl"] = section
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in section.items() if k != "per_step"}, indent=1))
    for s in per_step:
        print(s)


if __name__ == "__main__":
    main()
