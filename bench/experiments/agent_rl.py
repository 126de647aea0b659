"""Does agent RL add to imitation? Held-back expert SFT (easy tiers only), then RL on the harder
tiers with trajectory-only or step-level credit from the same SFT weights, vs the SFT-only model,
on the held-out tasks of the harder tiers; and one SFT round on the recovered episodes
(error -> feedback -> fix) with the recovery rate before and after.

    python bench/experiments/agent_rl.py --seed 0 --part /tmp/agent_rl/s0.json      # one seed (run seeds in parallel)
    python bench/experiments/agent_rl.py --collect /tmp/agent_rl/s*.json             # -> bench/results/agent_rl.json

One seed, in one process: SFT -> eval (SFT-only) -> [RL (trajectory) -> eval] -> restore SFT
weights -> [RL (step) -> eval] -> restore -> sample training tasks (temperature 1) and keep the
recovered episodes (`agents.recovered`, with the RL runs' stored episodes) -> one SFT round on
them -> eval. Every phase prints progress and the part file is rewritten after each, so a run cut
short still leaves what it measured. Paired CIs are task-level, as `tempering.evals.stats` computes
them: each task's outcome averaged over the seeds, then a bootstrap over tasks; the per-(seed, task)
outcomes go into the result (`unit_outcomes`) so that every figure can be recomputed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

MODEL = "smollm2-135m-instruct"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def episode_summary(batch) -> dict:
    eps = [g[0] for g in batch.groups]
    return {
        ep.task.id: {
            "env": ep.task.env,
            "tier": ep.task.tier,
            "success": bool(ep.stats.success),
            "errors": ep.stats.errors,
            "recovered": bool(ep.stats.recovered),
            "steps": ep.stats.steps,
            "invalid_calls": ep.stats.invalid_calls,
            "intact": bool(ep.stats.intact),
            "status": ep.stats.status,
        }
        for ep in eps
    }


def load_lora(model, directory: str) -> None:
    """A checkpoint's LoRA weights into `model` (hashes verified), or exit naming the directory."""
    from tempering.train.checkpoint import load_checkpoint

    weights = load_checkpoint(Path(directory))["weights"]
    if model.load_state_dict(weights, strict=False).unexpected_keys or not any("lora" in k for k in weights):
        raise SystemExit(f"{directory}: not this model's LoRA weights")


def in_set(env: str, tier: int, spec: str) -> bool:
    """Whether a task of `env` and `tier` is in the set ENV:TIERS (no tiers: every tier)."""
    name, _, tiers = spec.partition(":")
    return env == name and (not tiers or tier in [int(x) for x in tiers.split(",")])


def run_seed(args: argparse.Namespace) -> None:
    import torch

    from tempering.agents.config import AgentEvalSettings, AgentRLSettings, AgentSFTSettings
    from tempering.agents.episode import run_episodes
    from tempering.agents.policies import POLICIES, mistake_turns
    from tempering.agents.recovered import recovered_rows
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.agents.suites import load_agent_suite
    from tempering.agents.tasks import select
    from tempering.agents.training import AgentRolloutSource, episode_row, expert_examples
    from tempering.config import LoraSettings, TrainSettings
    from tempering.data.batches import SFTBatches
    from tempering.data.padding import pad_id
    from tempering.data.render import render_with_mask
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training
    from tempering.objectives.grpo import GRPOObjective
    from tempering.objectives.sft import SFTObjective
    from tempering.rollout.engine import HFEngine
    from tempering.sandbox import SandboxPool
    from tempering.train.trainer import Trainer

    torch.set_num_threads(args.threads)
    seed, part = args.seed, Path(args.part)
    part.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"agent_rl_s{seed}_"))
    suite = [task for name in args.suite for task in load_agent_suite(name)]  # one pool over the suites named
    sft_tasks = select(suite, "train", args.sft_tiers)
    rl_tasks = select(suite, "train", args.rl_tiers)
    held = select(suite, "heldout", args.eval_tiers)
    if args.gain_sets:  # only the held-out sets judged
        held = [t for t in held if any(in_set(t.env, t.tier, spec) for spec in args.gain_sets)]
    if args.eval_limit:
        held = held[: args.eval_limit]
    # failure-recovery data: sampled on the training tasks of --recovery-suite (default: the SFT
    # tasks) and measured on its held-out tasks (default: the held-out tasks above)
    recovery = load_agent_suite(args.recovery_suite) if args.recovery_suite else None
    harvest_tasks = select(recovery, "train") if recovery else sft_tasks
    recovery_held = select(recovery, "heldout") if recovery else held
    tok = load_tokenizer(MODEL)
    renderer = AgentRenderer(tok)
    model = load_for_training(MODEL, LoraSettings(r=16, alpha=32, dropout=0.0, last_layers=12))
    engine = HFEngine(model, tok, precision="auto")
    sandbox = SandboxPool(size=4)
    episode = EpisodeSettings(max_context_tokens=args.context)
    out: dict = {
        "seed": seed,
        "suite": args.suite,
        "sft_tiers": args.sft_tiers,
        "rl_tiers": args.rl_tiers,
        "settings": {k: v for k, v in vars(args).items() if k not in ("collect", "part")},
        "phases": {},
        "seconds": {},
    }

    def save() -> None:
        part.write_text(json.dumps(out, indent=1))

    def evaluate(label: str, tasks=held, opening_turns=None) -> None:
        t0 = time.perf_counter()
        sampling = AgentEvalSettings(max_new_tokens=args.max_new_tokens)
        batch = agent_rollout(
            tasks, engine, renderer, sandbox, sampling, episode, seed=seed, opening_turns=opening_turns
        )
        out["phases"][label] = episode_summary(batch)
        out["seconds"][f"eval_{label}"] = time.perf_counter() - t0
        phase = out["phases"][label].values()
        ok = [v["success"] for v in phase if v["tier"] in args.rl_tiers]
        every = [v["success"] for v in phase]
        log(
            f"seed {seed} eval {label}: completion {sum(ok)}/{len(ok)} on the held-out tasks of the RL tiers "
            f"{args.rl_tiers}, {sum(every)}/{len(every)} on all {len(every)} evaluated"
        )
        save()

    def sft(examples: list, steps: int, lr: float, name: str) -> dict:
        t0 = time.perf_counter()
        kept = [e for e in examples if len(e.input_ids) <= args.context]
        settings = AgentSFTSettings(
            steps=steps,
            batch_size=min(args.sft_batch, len(kept)),
            max_length=args.context,
            seed=seed,
            threads=args.threads,
            optim={"lr": lr, "warmup_steps": 2},
            checkpoint={"every": 10_000, "keep_last": 1},
        )
        batches = SFTBatches(kept, settings.batch_size, settings.max_length, pad_id(tok), True, seed)
        result = Trainer(model, SFTObjective(), batches, settings, work / name).fit()
        out["seconds"][name] = time.perf_counter() - t0
        return {
            "examples": len(kept),
            "steps": result.steps,
            "loss_first": result.loss_first,
            "loss_last": result.losses[-1],
        }

    expert = expert_examples(sft_tasks, renderer, sandbox)  # also the recovery round's mix
    if args.sft_from:  # a finished SFT of this seed (a run cut short): its checkpoint's LoRA weights
        log(f"seed {seed}: SFT weights from {args.sft_from}")
        load_lora(model, args.sft_from)
        out["sft"] = {"from_checkpoint": args.sft_from}
    else:
        log(f"seed {seed}: SFT on {len(sft_tasks)} expert episodes of tiers {args.sft_tiers}")
        out["sft"] = sft(expert, args.sft_steps, args.sft_lr, "sft")
    save()
    if args.sft_eval_from:  # that run's SFT-only eval, already measured on the same weights
        earlier = json.loads(Path(args.sft_eval_from).read_text())
        out["phases"]["sft"], out["sft"]["eval_from"] = earlier["phases"]["sft"], args.sft_eval_from
        save()
    else:
        evaluate("sft")
    sft_state = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora" in k}
    stores = []
    for credit in args.credits:
        model.load_state_dict(sft_state, strict=False)
        rl = AgentRLSettings(
            temperature=1.0,
            max_new_tokens=args.max_new_tokens,
            prompts_per_step=args.prompts,
            group_size=args.group,
            max_refills=args.refills,
            credit=credit,
        )
        store = work / f"trajectories_{credit}.jsonl"
        stores.append(store)
        source = AgentRolloutSource(
            rl_tasks,
            engine,
            renderer,
            sandbox,
            rl,
            episode,
            args.grad_accum,
            seed,
            tiers=args.rl_tiers,
            promote_at=args.promote_at,
            window=args.window,
            review=args.review,
            credit=credit,
            step=rl.step,
            max_refills=args.refills,
            store=store,
            model=model,
            precision="fp32",
        )
        train = TrainSettings(
            steps=args.rl_steps,
            grad_accum=args.grad_accum,
            seed=seed,
            threads=args.threads,
            optim={"lr": args.rl_lr},
            checkpoint={"every": 10_000, "keep_last": 1},
        )
        log(f"seed {seed}: RL ({credit} credit) {args.rl_steps} steps on tiers {args.rl_tiers}")
        t0 = time.perf_counter()
        result = Trainer(model, GRPOObjective(rl), source, train, work / f"rl_{credit}").fit()
        out["seconds"][f"rl_{credit}"] = time.perf_counter() - t0
        keys = (
            "tier", "success_rate", "reward_mean", "shaping_mean", "groups", "groups_kept", "groups_tied",
            "refill_rounds", "curriculum/pass_rate", "curriculum/promoted", "loss", "grad_norm", "turns",
            "invalid_calls", "time/generation_s", "time/environment_s",
        )  # fmt: skip
        out[f"curve_{credit}"] = [{k: h.get(k) for k in keys if k in h} for h in result.history]
        for i, h in enumerate(result.history):
            log(
                f"seed {seed} {credit} step {i + 1}: tier {h.get('tier')} success {h.get('success_rate', 0):.2f} "
                f"groups kept {h.get('groups_kept')} tied {h.get('groups_tied')}"
            )
        save()
        evaluate(f"rl_{credit}")

    if not args.harvest_n and args.recovery_source == "sampled":
        sandbox.close()
        log(f"seed {seed}: done (no recovery phase)")
        return
    # recovered episodes: the RL runs' stored episodes plus samples on the training tasks from the SFT model
    model.load_state_dict(sft_state, strict=False)
    t0 = time.perf_counter()
    harvest = work / "harvest.jsonl"
    sampling = AgentRLSettings(temperature=1.0, max_new_tokens=args.max_new_tokens)
    if recovery:
        evaluate("recovery_base", recovery_held)  # the SFT model on the recovery suite's held-out tasks
    if args.recovery_probe:  # every held-out episode opens with the task's scripted mistake and its real error
        evaluate("probe_base", [t for t in recovery_held if t.mistake], mistake_turns)
    if args.recovery_source == "scripted":  # the tasks' scripted mistake, its real feedback, the expert's fix
        episodes = [
            r.row() for r in run_episodes(sandbox, POLICIES["mistake"], [t for t in harvest_tasks if t.mistake])
        ]
    else:
        batch = agent_rollout(
            harvest_tasks, engine, renderer, sandbox, sampling, episode, n=args.harvest_n, seed=seed + 1000
        )
        episodes = [episode_row(ep, 0) for group in batch.groups for ep in group]
    with open(harvest, "w") as f:
        for row in episodes:
            f.write(json.dumps(row) + "\n")
    rows = []
    for path in [harvest, *stores]:
        if path.is_file():
            rows += recovered_rows(
                [json.loads(line) for line in path.read_text().splitlines() if line], f"bench-s{seed}-{path.stem}"
            )
    out["seconds"]["harvest"] = time.perf_counter() - t0
    out["recovered_rows"] = len(rows)
    out["recovered_provenance"] = [r["provenance"] for r in rows]
    log(f"seed {seed}: {len(rows)} recovered episodes exported")
    save()
    if rows:
        examples = [render_with_mask(tok, r["messages"], renderer.style, renderer.eot_id) for r in rows]
        examples = examples * max(1, 6 // len(examples))
        if args.recovery_mix_expert:  # the SFT's expert episodes beside the fixes: the first turn stays a call
            kept = random.Random(seed).sample(expert, min(len(expert), round(args.recovery_mix_expert * len(examples))))
            out["recovery_mixed_expert"] = len(kept)
            log(f"seed {seed}: recovery round mixes {len(kept)} expert episodes with {len(examples)} recovered")
            examples = examples + kept
        out["recovery_sft"] = sft(examples, args.recovery_steps, args.recovery_lr, "recovery_sft")
        evaluate("recovery_sft", recovery_held)
        if args.recovery_probe:
            evaluate("probe_after", [t for t in recovery_held if t.mistake], mistake_turns)
    sandbox.close()
    log(f"seed {seed}: done")


def paired(units: dict[tuple, tuple[float, float]], resamples: int = 4000) -> dict:
    """Mean of b - a and its 95% CI the task-level way of `tempering.evals.stats`: each task's
    outcomes averaged over the seeds it ran in, then a paired bootstrap over tasks. `units` maps
    (seed or part, task id) to the pair (a, b); `n` counts tasks, `units` the (seed, task) pairs."""
    from tempering.evals.stats import paired_bootstrap

    if not units:
        return {"delta": None, "ci_low": None, "ci_high": None, "n": 0, "units": 0, "unit": "task"}
    by_task: dict[str, list[tuple[float, float]]] = {}
    for (_, task), pair in sorted(units.items()):
        by_task.setdefault(task, []).append(pair)
    a = [[x for x, _ in pairs] for pairs in by_task.values()]
    b = [[y for _, y in pairs] for pairs in by_task.values()]
    c = paired_bootstrap(a, b, resamples=resamples)
    return {"delta": c.delta, "ci_low": c.low, "ci_high": c.high, "n": c.n, "units": len(units), "unit": "task"}


def recovery_delta(parts: list[dict], before: str, after: str, resamples: int = 4000) -> dict:
    """Recovery rate (successes among episodes with an error) after minus before, with a bootstrap
    over tasks (`tempering.evals.stats.bootstrap_statistic`): a task carries its episodes of every
    seed, before and after, and the rates are recomputed over each resample of tasks."""
    from tempering.evals.stats import bootstrap_statistic

    units = [
        (t, p["phases"][before][t], p["phases"][after][t])
        for p in parts
        if before in p["phases"] and after in p["phases"]
        for t in p["phases"][before]
    ]
    empty = {"before": None, "after": None, "delta": None, "ci_low": None, "ci_high": None, "units": 0}
    if not units:
        return empty | {"tasks": 0, "unit": "task"}
    tasks = sorted({t for t, _, _ in units})
    cols = np.zeros((4, len(tasks)))  # errors before, recovered before, errors after, recovered after
    for t, a, b in units:
        k = tasks.index(t)
        cols[:, k] += [
            a["errors"] > 0,
            a["errors"] > 0 and a["success"],
            b["errors"] > 0,
            b["errors"] > 0 and b["success"],
        ]

    def rate(err, ok) -> float:
        return float(ok.sum() / err.sum()) if err.sum() else float("nan")

    a, b = rate(cols[0], cols[1]), rate(cols[2], cols[3])
    out = {
        "before": None if np.isnan(a) else a,
        "after": None if np.isnan(b) else b,
        "episodes_with_error_before": int(cols[0].sum()),
        "episodes_with_error_after": int(cols[2].sum()),
        "units": len(units),
        "tasks": len(tasks),
        "unit": "task",
    }
    try:
        e = bootstrap_statistic(lambda ea, ra, eb, rb: rate(eb, rb) - rate(ea, ra), *cols, resamples=resamples)
    except ValueError:  # no episode with an error on one side: no rate to compare
        return out | {"delta": None, "ci_low": None, "ci_high": None}
    return out | {"delta": e.mean, "ci_low": e.low, "ci_high": e.high}


def merge_seeds(parts: list[dict]) -> list[dict]:
    """Parts of the same seed (e.g. one credit each, run in separate processes) united into one,
    phases and curves added, when their SFT evals agree task by task. When they differ (SFT on
    CPU is not bit-reproducible across processes), they stay separate parts: each credit is then
    compared with its own SFT, and credits with each other by (seed, task) (`across_parts`)."""
    merged: list[dict] = []
    for part in parts:
        first = next(
            (m for m in merged if m["seed"] == part["seed"] and m["phases"]["sft"] == part["phases"]["sft"]), None
        )
        if first is None:
            merged.append(json.loads(json.dumps(part)))
            continue
        for phase, scores in part["phases"].items():
            first["phases"].setdefault(phase, scores)
        for key, value in part.items():
            first.setdefault(key, value)
        for name, secs in part["seconds"].items():
            first["seconds"].setdefault(name, secs)
        credits = first["settings"]["credits"]
        credits += [c for c in part["settings"]["credits"] if c not in credits]
    return merged


def across_parts(parts: list[dict], a: str, b: str, tiers: list[int]) -> dict:
    """Phase b minus phase a paired by (seed, task), wherever each phase was measured; task-level CI."""

    def by_unit(phase: str) -> dict:
        return {
            (p["seed"], t): float(v["success"])
            for p in parts
            if phase in p["phases"]
            for t, v in p["phases"][phase].items()
            if v["tier"] in tiers
        }

    left, right = by_unit(a), by_unit(b)
    return paired({u: (left[u], right[u]) for u in sorted(left) if u in right})


def unit_outcomes(parts: list[dict]) -> list[dict]:
    """Each part's held-out success per phase and task (0/1): the per-(seed, task) records every
    interval of the result is computed from, kept so that they can be recomputed."""
    return [
        {
            "seed": p["seed"],
            "credits": p["settings"]["credits"],
            "phases": {ph: {t: int(v["success"]) for t, v in eps.items()} for ph, eps in p["phases"].items()},
        }
        for p in parts
    ]


def collect(paths: list[str], out_path: Path, note: str) -> dict:
    parts = merge_seeds([json.loads(Path(p).read_text()) for p in paths])
    tiers = parts[0]["rl_tiers"]

    def gain(a: str, b: str, tier_set=tiers, keep=None) -> dict:
        """Phase b minus phase a over the units whose episode `keep` takes (default: the tiers)."""
        keep = keep or (lambda v: v["tier"] in tier_set)
        units = {
            (i, t): (float(p["phases"][a][t]["success"]), float(p["phases"][b][t]["success"]))
            for i, p in enumerate(parts)
            if a in p["phases"] and b in p["phases"]
            for t, v in p["phases"][a].items()
            if keep(v)
        }
        return paired(units)

    def completion(phase: str, tier_set=tiers, keep=None) -> float | None:
        keep = keep or (lambda v: v["tier"] in tier_set)
        vals = [v["success"] for p in parts if phase in p["phases"] for v in p["phases"][phase].values() if keep(v)]
        return sum(vals) / len(vals) if vals else None

    credits = list(dict.fromkeys(c for p in parts for c in p["settings"]["credits"]))
    seeds = sorted({p["seed"] for p in parts})
    head = credits[0] if credits else None
    base = "recovery_base" if "recovery_base" in parts[0]["phases"] else "sft"  # the recovery round's starting point
    main = gain("sft", f"rl_{head}") if head else paired({})
    # held-out sets judged apart (e.g. workspace tiers 2-3 and every repository tier): each its own
    # paired gain; the headline is the weakest set's (the claim must hold on every one)
    sets = {}
    for spec in parts[0]["settings"].get("gain_sets") or []:

        def keep(v: dict, spec=spec) -> bool:
            return in_set(v.get("env"), v["tier"], spec)

        sets[spec] = {
            "gain": gain("sft", f"rl_{head}", keep=keep) if head else paired({}),
            "completion": {ph: completion(ph, keep=keep) for ph in ["sft", *[f"rl_{c}" for c in credits]]},
        }
    if sets:
        weakest = min(sets, key=lambda k: sets[k]["gain"]["ci_low"] if sets[k]["gain"]["n"] else float("-inf"))
        main = sets[weakest]["gain"]
    result = {
        "benchmark": "agent RL after held-back SFT",
        "model": MODEL,
        "suite": parts[0]["suite"],
        "seeds": seeds,
        "parts_per_seed": {str(k): sum(p["seed"] == k for p in parts) for k in seeds},
        "sft_tiers": parts[0]["sft_tiers"],
        "rl_tiers": tiers,
        "heldout_tasks_in_rl_tiers": len([v for v in parts[0]["phases"]["sft"].values() if v["tier"] in tiers]),
        "headline_credit": head,
        "rl_over_sft_gain": main["delta"],
        "rl_over_sft_gain_ci_low": main["ci_low"],
        "rl_over_sft_gain_ci_high": main["ci_high"],
        "rl_steps": min(p["settings"]["rl_steps"] for p in parts),  # every seed ran at least this many
        "tasks": main["n"],  # the CI resamples tasks, each averaged over its seeds
        "units": main["units"],
        "gain_sets": sets,
        "headline_set": weakest if sets else None,
        "completion": {
            phase: {"rl_tiers": completion(phase), "all_tiers": completion(phase, [1, 2, 3, 4, 5])}
            for phase in ["sft", *[f"rl_{c}" for c in credits], "recovery_sft"]
        },
        "credit": {c: gain("sft", f"rl_{c}") for c in credits},
        "step_minus_trajectory": across_parts(parts, "rl_trajectory", "rl_step", tiers)
        if {"trajectory", "step"} <= set(credits)
        else None,
        "learning_curve": {c: {str(p["seed"]): p[f"curve_{c}"] for p in parts if f"curve_{c}" in p} for c in credits},
        "recovered_rows": {str(p["seed"]): p["recovered_rows"] for p in parts if "recovered_rows" in p},
        "recovery_sft": {str(p["seed"]): p["recovery_sft"] for p in parts if "recovery_sft" in p},
        "recovery_suite": parts[0]["settings"].get("recovery_suite") or parts[0]["suite"],
        "recovery_rate": recovery_delta(parts, base, "recovery_sft"),
        "completion_gain_after_recovery_sft_all_tiers": gain(base, "recovery_sft", [1, 2, 3, 4, 5]),
        "recovery_probe": recovery_delta(parts, "probe_base", "probe_after"),
        "seconds": {str(k): {n: v for p in parts if p["seed"] == k for n, v in p["seconds"].items()} for k in seeds},
        "settings": parts[0]["settings"],
        # what a seed ran with where it differs from the first part (e.g. resumed from its SFT checkpoint)
        "settings_by_seed": {
            key: {str(p["seed"]): p["settings"].get(key) for p in parts}
            for key in sorted({k for p in parts for k in p["settings"]})
            if key != "seed" and len({json.dumps(p["settings"].get(key)) for p in parts}) > 1
        },
        "unit_outcomes": unit_outcomes(parts),
        "load_average": os.getloadavg(),
        "note": note,
    }
    # the headline: the probe where it ran (every episode errs, so every unit counts), else natural episodes
    headline = result["recovery_probe"] if result["recovery_probe"]["units"] else result["recovery_rate"]
    result["recovery_rate_delta"] = headline["delta"]
    result["recovery_rate_delta_ci_low"] = headline["ci_low"]
    out_path.write_text(json.dumps(result, indent=1))
    return result


def plot_curve(result: dict, path: Path, smooth: int = 5) -> None:
    """The learning curve of the headline credit: per seed, training-episode success, step-credit
    shaping and invalid calls per step, each a running mean over `smooth` steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = result["learning_curve"].get(result["headline_credit"] or "", {})
    keys = [
        ("success_rate", "training success"),
        ("shaping_mean", "shaping / episode"),
        ("invalid_calls", "invalid calls / episode"),
    ]
    fig, axes = plt.subplots(1, len(keys), figsize=(10, 3))
    for ax, (key, label) in zip(axes, keys):
        for seed, curve in sorted(curves.items()):
            ys = [h.get(key) or 0.0 for h in curve]
            windows = [ys[max(0, i - smooth + 1) : i + 1] for i in range(len(ys))]
            run = [sum(w) / len(w) for w in windows]
            ax.plot(range(1, len(run) + 1), run, label=f"seed {seed}")
        ax.set_xlabel("RL step")
        ax.set_title(label, fontsize=9)
    axes[0].legend(fontsize=8)
    suite = result["suite"] if isinstance(result["suite"], list) else [result["suite"]]
    fig.suptitle(f"agent RL ({result['headline_credit']} credit), {' + '.join(suite)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", default="/tmp/agent_rl/s0.json")
    ap.add_argument("--collect", nargs="*", help="Only aggregate these part files.")
    ap.add_argument("--out", default=str(RESULTS / "agent_rl.json"))
    ap.add_argument("--note", default="")
    ap.add_argument("--suite", nargs="+", default=["workspace"], help="One or more suites, pooled.")
    ap.add_argument("--sft-tiers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rl-tiers", type=int, nargs="+", default=[2, 3])
    ap.add_argument(
        "--credits", nargs="*", default=["trajectory", "step"], help="none: no RL (the recovery phase only)"
    )
    ap.add_argument("--sft-steps", type=int, default=16)
    ap.add_argument("--sft-from", default=None, help="An SFT checkpoint of this seed: its weights, no SFT run.")
    ap.add_argument("--sft-eval-from", default=None, help="A part file whose SFT-only eval these weights already had.")
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--sft-batch", type=int, default=6)
    ap.add_argument("--rl-steps", type=int, default=6)
    ap.add_argument("--rl-lr", type=float, default=5e-5)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument(
        "--grad-accum", type=int, default=1, help="RL micro-batches a step (whole groups each): less memory."
    )
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--refills", type=int, default=1)
    ap.add_argument("--promote-at", type=float, default=0.5)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--review", type=float, default=0.0, help="curriculum: share of tasks from the tiers passed")
    ap.add_argument("--max-new-tokens", type=int, default=144)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--harvest-n", type=int, default=2)
    ap.add_argument(
        "--recovery-source",
        choices=["sampled", "scripted"],
        default="sampled",
        help="Recovered episodes from the SFT model's samples, or the tasks' scripted mistake then the expert's fix.",
    )
    ap.add_argument(
        "--recovery-suite", default=None, help="Harvest its train split, measure recovery on its held-out split."
    )
    ap.add_argument("--recovery-steps", type=int, default=6)
    ap.add_argument("--recovery-lr", type=float, default=5e-4)
    ap.add_argument(
        "--recovery-probe",
        action="store_true",
        help="Also measure recovery with the held-out tasks' scripted mistake played first (every episode errs).",
    )
    ap.add_argument(
        "--recovery-mix-expert",
        type=float,
        default=0.0,
        help="Expert episodes of the SFT tasks mixed into the recovery round, as a share of its recovered rows.",
    )
    ap.add_argument(
        "--gain-sets",
        nargs="*",
        default=[],
        help="Held-out sets judged apart, ENV:TIERS (workspace:2,3 repo:); the headline is the weakest.",
    )
    ap.add_argument("--eval-limit", type=int, default=0)
    ap.add_argument("--eval-tiers", type=int, nargs="*", default=None, help="Held-out tiers evaluated (default: all).")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.collect:
        res = collect(args.collect, Path(args.out), args.note)
        if res["learning_curve"]:
            plot_curve(res, Path(args.out).with_suffix(".png"))
        print(
            json.dumps(
                {
                    k: res[k]
                    for k in ("rl_over_sft_gain", "rl_over_sft_gain_ci_low", "rl_steps", "recovery_rate_delta_ci_low")
                }
            )
        )
        return
    run_seed(args)


if __name__ == "__main__":
    main()
