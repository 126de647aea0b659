"""Did RL improve what it trained on? Greedy completion of saved LoRA checkpoints (e.g. one seed's
SFT and its RL after SFT) on the *training* tasks of the tiers RL sampled, paired by task. Beside
`agent_rl.py`'s held-out gain it separates "RL learned nothing" from "RL learned, it did not
transfer".

    python bench/experiments/agent_rl_indist.py --seed 1 --suite workspace repo --tiers 1 \\
        --checkpoint sft=CKPT_DIR --checkpoint rl_step=CKPT_DIR --out /tmp/indist/s1.json
    python bench/experiments/agent_rl_indist.py --collect /tmp/indist/s*.json --out bench/results/agent_rl_indist.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from agent_rl import MODEL, episode_summary, load_lora, log, paired  # noqa: E402


def pairs(runs: list[dict], base: str, label: str, env: str | None = None) -> dict[tuple, tuple[float, float]]:
    """(base, label) successes by (seed, task) over runs, optionally one environment's tasks; `paired`
    averages each task over the seeds it ran in and bootstraps tasks."""
    return {
        (r["seed"], t): (float(r["phases"][base][t]["success"]), float(v["success"]))
        for r in runs
        for t, v in r["phases"][label].items()
        if env in (None, v["env"])
    }


def collect(paths: list[str], out: Path) -> dict:
    """Per-seed files pooled: each later checkpoint minus the first, paired by (seed, task)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    base, *others = runs[0]["checkpoints"]
    envs = sorted({v["env"] for r in runs for p in r["phases"].values() for v in p.values()})
    result = {
        "benchmark": runs[0]["benchmark"] + ", seeds pooled",
        "model": MODEL,
        "seeds": {
            str(r["seed"]): {k: r[k] for k in ("tiers", "completion", "gain", "invalid_calls_per_episode")}
            for r in runs
        },
        "gain": {f"{label}_minus_{base}": paired(pairs(runs, base, label)) for label in others},
        "gain_by_env": {
            env: {f"{label}_minus_{base}": paired(pairs(runs, base, label, env)) for label in others} for env in envs
        },
        "unit_outcomes": [
            {
                "seed": r["seed"],
                "phases": {ph: {t: int(v["success"]) for t, v in eps.items()} for ph, eps in r["phases"].items()},
            }
            for r in runs
        ],
    }
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("gain", "gain_by_env")}, indent=1))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collect", nargs="+", help="Only pool these per-seed files into --out.")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--suite", nargs="+", default=["workspace", "repo"])
    ap.add_argument("--split", default="train", choices=["train", "heldout"])
    ap.add_argument("--tiers", type=int, nargs="*", default=None)
    ap.add_argument("--checkpoint", action="append", help="LABEL=DIR, the first is the base")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--context", type=int, default=1536)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.collect:
        collect(args.collect, args.out)
        return
    if args.seed is None or not args.checkpoint:
        ap.error("--seed and --checkpoint are needed unless --collect")
    checkpoints = dict(c.split("=", 1) for c in args.checkpoint)

    import torch

    from tempering.agents.config import AgentEvalSettings
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.agents.suites import load_agent_suite
    from tempering.agents.tasks import select
    from tempering.config import EngineSettings, LoraSettings
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training
    from tempering.rollout.select import build_engine
    from tempering.sandbox import SandboxPool

    torch.set_num_threads(args.threads)
    tasks = select([t for name in args.suite for t in load_agent_suite(name)], args.split, args.tiers)
    tok = load_tokenizer(MODEL)
    model = load_for_training(MODEL, LoraSettings(r=16, alpha=32, dropout=0.0, last_layers=12))
    engine = build_engine(
        EngineSettings.model_validate({"kind": "hf"}), model, tok, "auto"
    )  # temper agent's default engine
    renderer, sandbox = AgentRenderer(tok), SandboxPool(size=4)
    phases: dict[str, dict] = {}
    for label, directory in checkpoints.items():
        load_lora(model, directory)
        t0 = time.perf_counter()
        batch = agent_rollout(
            tasks,
            engine,
            renderer,
            sandbox,
            AgentEvalSettings(max_new_tokens=args.max_new_tokens),
            EpisodeSettings(max_context_tokens=args.context),
            seed=args.seed,
        )
        phases[label] = episode_summary(batch)
        ok = [v["success"] for v in phases[label].values()]
        log(
            f"seed {args.seed} {label}: {sum(ok)}/{len(ok)} of the {args.split} tasks ({time.perf_counter() - t0:.0f} s)"
        )
    base, *others = checkpoints

    def by_env(label: str) -> dict:
        return {
            env: f"{sum(v['success'] for v in phases[label].values() if v['env'] == env)}/"
            f"{sum(v['env'] == env for v in phases[label].values())}"
            for env in args.suite
        }

    result = {
        "benchmark": "agent RL: greedy completion on the tasks it trained on",
        "model": MODEL,
        "seed": args.seed,
        "split": args.split,
        "tiers": args.tiers,
        "checkpoints": checkpoints,
        "completion": {label: by_env(label) for label in checkpoints},
        "invalid_calls_per_episode": {
            label: sum(v["invalid_calls"] for v in p.values()) / len(p) for label, p in phases.items()
        },
        "phases": phases,
    }
    result["gain"] = {f"{label}_minus_{base}": paired(pairs([result], base, label)) for label in others}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("completion", "gain", "invalid_calls_per_episode")}, indent=1))


if __name__ == "__main__":
    main()
