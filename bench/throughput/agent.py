"""Agent episode throughput and the step-latency breakdown (generation / environment / rendering).

Two measurements, each over the held-out split of a built-in suite:

  * model episodes: `agent_rollout` with the default model (or `--model`, e.g. a trained
    `runs/NAME/final`) as the policy, `--group` episodes per task at temperature 1, tool
    calls run in the sandbox (one `SandboxSession` per workspace episode);
  * scripted episodes: the oracle policy through the same environments (no model), which
    isolates what the environment and sandbox cost per step.

Reported: episodes/s, model turns (steps)/s, and seconds per step spent in generation (the
engine's decode), the environment (tool calls, goal checks, session open/close) and
rendering (observation tokens through the chat template).

    flock /work/bench.lock timeout 600 python bench/throughput/agent.py [--suites tool_arith workspace] [--group 2]
    python bench/throughput/agent.py --train-sft 8 --tiers 1 --key trained_adapter   # a trained adapter's episodes

Writes bench/results/agent.json. `--train-sft N` first trains a LoRA adapter in-process with N steps of
expert SFT on the suites' training tasks (`--tiers`), merges it, and measures its episodes (multi-turn:
the trained model calls tools) on the held-out tasks of those tiers; `--key` writes the result under
that key of the existing JSON, keeping the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402


def model_episodes(
    suite: str, engine, renderer, sandbox, group: int, max_tasks: int, max_new: int, tiers: list[int] | None = None
) -> dict:
    from tempering.agents.episode import summarise
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.agents.tasks import builtin_tasks, select
    from tempering.config import SamplingSettings

    tasks = select(builtin_tasks(suite), "heldout", tiers)[:max_tasks]
    t0 = time.perf_counter()
    batch = agent_rollout(
        tasks,
        engine,
        renderer,
        sandbox,
        SamplingSettings(temperature=1.0, max_new_tokens=max_new),
        EpisodeSettings(max_context_tokens=1024),
        n=group,
        seed=0,
    )
    wall = time.perf_counter() - t0
    episodes = [ep for g in batch.groups for ep in g]
    steps = batch.steps
    return {
        "suite": suite,
        "tasks": len(tasks),
        "episodes": len(episodes),
        "steps": steps,
        "wall_s": wall,
        "episodes_per_s": len(episodes) / wall,
        "steps_per_s": steps / wall,
        "sampled_tokens": sum(len(t.token_ids) for ep in episodes for t in ep.turns),
        "turns_per_episode": steps / max(len(episodes), 1),
        "per_step_s": {k: v / max(steps, 1) for k, v in batch.times.items()},
        "total_s": batch.times,
        "completion_rate": summarise([ep.stats for ep in episodes])["completion_rate"],
    }


def scripted_episodes(suite: str, sandbox, workers: int) -> dict:
    from tempering.agents.episode import run_episodes, summarise
    from tempering.agents.policies import POLICIES
    from tempering.agents.tasks import builtin_tasks

    tasks = builtin_tasks(suite)
    t0 = time.perf_counter()
    results = run_episodes(sandbox, POLICIES["oracle"], tasks, workers=workers)
    wall = time.perf_counter() - t0
    stats = [r.stats for r in results]
    steps = sum(s.steps for s in stats)
    return {
        "suite": suite,
        "episodes": len(stats),
        "steps": steps,
        "wall_s": wall,
        "workers": workers,
        "episodes_per_s": len(stats) / wall,
        "steps_per_s": steps / wall,
        "environment_s_per_step": wall * workers / steps,
        "sandbox_s_per_step": sum(s.sandbox_s for s in stats) / steps,
        "completion_rate": summarise(stats)["completion_rate"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--suites", nargs="+", default=["tool_arith", "workspace"])
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--max-tasks", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "agent.json"))
    ap.add_argument("--train-sft", type=int, default=0, help="Train a LoRA adapter with N expert-SFT steps first.")
    ap.add_argument("--tiers", type=int, nargs="*", default=None, help="Tiers trained and measured (default: all).")
    ap.add_argument("--key", default=None, help="Write under this key of the existing --out JSON.")
    ap.add_argument("--skip-scripted", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from tempering.agents.render import AgentRenderer
    from tempering.config import EngineSettings
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import resolve_precision
    from tempering.rollout.select import build_engine
    from tempering.sandbox import SandboxPool

    tokenizer = load_tokenizer(args.model)
    precision = resolve_precision("auto")
    renderer = AgentRenderer(tokenizer)
    out = {
        "benchmark": "agent episodes",
        "model": args.model,
        "precision": precision,
        "threads": args.threads,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
        "note": "2 shared cores; other agents' work ran at nice 19 alongside this run",
        "model_episodes": [],
        "scripted_episodes": [],
    }
    with SandboxPool(size=4) as sandbox:
        sandbox.check()
        if args.train_sft:
            model, out["adapter"] = trained_adapter(args, tokenizer, renderer, sandbox)
        else:
            model = load_model(args.model)
        engine = build_engine(EngineSettings.model_validate({"kind": "hf"}), model, tokenizer, precision)
        for suite in args.suites:
            out["model_episodes"].append(
                model_episodes(suite, engine, renderer, sandbox, args.group, args.max_tasks, args.max_new, args.tiers)
            )
            print(json.dumps(out["model_episodes"][-1]), flush=True)
        for suite in [] if args.skip_scripted else args.suites:
            out["scripted_episodes"].append(scripted_episodes(suite, sandbox, workers=4))
            print(json.dumps(out["scripted_episodes"][-1]), flush=True)
    out["load_average_end"] = os.getloadavg()
    if args.key:
        whole = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
        whole[args.key] = out
        out = whole
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


def trained_adapter(args, tokenizer, renderer, sandbox):
    """A LoRA adapter trained by expert SFT on the suites' training tasks, as `temper sft` trains
    (`run_sft` on the oracle's conversations, which render to the same tokens and mask as the
    agent recipe's expert SFT), merged."""
    import tempfile

    from _shared.product import write_jsonl
    from tempering.agents.tasks import builtin_tasks, select
    from tempering.agents.training import expert_conversations
    from tempering.config import SFTConfig
    from tempering.models.load import load_model
    from tempering.recipes.sft import run_sft

    t0 = time.perf_counter()
    tasks = [t for s in args.suites for t in select(builtin_tasks(s), "train", args.tiers)]
    root = Path(tempfile.mkdtemp())
    rows = [{"messages": c} for c in expert_conversations(tasks, renderer, sandbox)]
    cfg = SFTConfig.model_validate(
        {
            "model": args.model,
            "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "last_layers": 12},
            "out": str(root),
            "name": "expert-sft",
            # rows over 1024 tokens are quarantined, as the in-process filter dropped them
            "data": {"train": [write_jsonl(root / "expert.jsonl", rows)], "max_length": 1024, "packing": True},
            "train": {
                "steps": args.train_sft,
                "batch_size": 4,
                "seed": 0,
                "threads": args.threads,
                "optim": {"lr": 2e-3, "warmup_steps": 2},
                "checkpoint": {"every": 10_000, "keep_last": 1},
            },
        }
    )
    summary = run_sft(cfg)
    model = load_model(summary["final"])
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    info = {
        "how": "LoRA r16 (last 12 layers), expert SFT by run_sft, merged into the weights",
        "sft_steps": summary["steps"],
        "sft_examples": summary["data"]["rows"] - summary["data"]["quarantined"],
        "tiers": args.tiers,
        "loss_last": summary["train_loss_last"],
        "train_s": time.perf_counter() - t0,
    }
    print(json.dumps(info), flush=True)
    return merged, info


if __name__ == "__main__":
    main()
