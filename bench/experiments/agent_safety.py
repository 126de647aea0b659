"""Does the `safe_actions` component train a destructive habit out of an agent (docs/safety.md,
"Agents")? An agent is SFT'd on demonstrations of the `safe` suite where a share of the training
tasks is shown its destructive `shortcut` (`rm -rf`, `find -delete`, `truncate`, `sed -i` on a
protected file: each reaches the goal, and only `safe_actions` tells it apart). From the same SFT
weights, GRPO runs twice with the same budget and sampling:

  safe_actions      episode.unsafe_action_penalty = --penalty (a flagged call costs the turn's reward)
  completion_only   the penalty 0: the reward sees only the goal (the control)

Each is evaluated greedily on the held-out `safe` tasks (other wordings and names than training):
per task, whether it succeeded and whether any call was flagged. Pooled over (task, seed) units:
the paired change of the destructive-action rate and of completion, RL arm minus SFT.

    python bench/experiments/agent_safety.py --seed 0 --part /tmp/agent_safety/s0.json   # one seed
    python bench/experiments/agent_safety.py --collect /tmp/agent_safety/s*.json          # -> agent_safety.json

The part file is rewritten after every phase, so a run cut short keeps what it measured.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

MODEL = "smollm2-135m-instruct"
ARMS = {"safe_actions": None, "completion_only": 0.0}  # None: --penalty


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


def with_habit(tasks: list, share: float, seed: int) -> tuple[list, list[str]]:
    """The training tasks with a seeded `share` of them demonstrated by their destructive shortcut."""
    rng = random.Random(seed)
    able = [t for t in tasks if t.shortcut]
    habit = {t.id for t in rng.sample(able, round(share * len(able)))}
    return [t.model_copy(update={"solution": t.shortcut}) if t.id in habit else t for t in tasks], sorted(habit)


def run_seed(args: argparse.Namespace) -> None:
    import torch

    from tempering.agents.config import AgentEvalSettings, AgentRLSettings, AgentSFTSettings
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.agents.tasks import builtin_tasks, select
    from tempering.agents.training import AgentRolloutSource, expert_examples
    from tempering.config import LoraSettings, TrainSettings
    from tempering.data.batches import SFTBatches
    from tempering.data.padding import pad_id
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
    work = Path(tempfile.mkdtemp(prefix=f"agent_safety_s{seed}_"))
    suite = builtin_tasks("safe")
    train, held = select(suite, "train"), select(suite, "heldout")
    demos, habit = with_habit(train, args.shortcut_share, seed)
    tok = load_tokenizer(MODEL)
    renderer = AgentRenderer(tok)
    lora = LoraSettings(r=16, alpha=32, dropout=0.0, last_layers=12)
    model = load_for_training(MODEL, lora)
    engine = HFEngine(model, tok, precision="auto")
    sandbox = SandboxPool(size=4)
    out: dict = {
        "seed": seed,
        "settings": {k: v for k, v in vars(args).items() if k not in ("collect", "part")},
        "train_tasks": len(train),
        "heldout_tasks": len(held),
        "shortcut_demos": habit,
        "phases": {},
        "curves": {},
        "seconds": {},
    }

    def save() -> None:
        part.write_text(json.dumps(out, indent=1))

    def evaluate(label: str, penalty: float) -> None:
        t0 = time.perf_counter()
        episode = EpisodeSettings(max_context_tokens=args.context, unsafe_action_penalty=penalty)
        sampling = AgentEvalSettings(max_new_tokens=args.max_new_tokens)
        batch = agent_rollout(held, engine, renderer, sandbox, sampling, episode, seed=seed)
        eps = [g[0] for g in batch.groups]
        out["phases"][label] = {
            ep.task.id: {
                "family": ep.task.family,
                "success": bool(ep.stats.success),
                "unsafe": ep.stats.unsafe_actions > 0,
                "reasons": ep.stats.unsafe_reasons,
                "first_turn": tok.decode(ep.turns[0].token_ids)[:200] if ep.turns else "",
            }
            for ep in eps
        }
        out["seconds"][f"eval_{label}"] = time.perf_counter() - t0
        res = out["phases"][label].values()
        log(
            f"seed {seed} eval {label}: completion {sum(r['success'] for r in res)}/{len(eps)}, "
            f"destructive {sum(r['unsafe'] for r in res)}/{len(eps)}"
        )
        save()

    t0 = time.perf_counter()
    if args.sft_from:  # an earlier seed's SFT weights: a new RL arm from the very same start
        from safetensors.torch import load_file

        weights = load_file(str(Path(args.sft_from) / "weights.safetensors"))
        missing = {k for k, v in model.named_parameters() if v.requires_grad} - set(weights)
        if missing:
            raise SystemExit(f"{args.sft_from}: no weights for {sorted(missing)[0]} (and {len(missing) - 1} more)")
        model.load_state_dict(weights, strict=False)
        out["sft"] = {"from": args.sft_from}
        log(f"seed {seed}: SFT weights from {args.sft_from}")
    else:
        examples = [e for e in expert_examples(demos, renderer, sandbox) if len(e.input_ids) <= args.context]
        sft_settings = AgentSFTSettings(
            steps=args.sft_steps,
            batch_size=args.sft_batch,
            max_length=args.context,
            seed=seed,
            threads=args.threads,
            optim={"lr": args.sft_lr, "warmup_steps": 2},
            checkpoint={"every": 10_000, "keep_last": 1},
        )
        batches = SFTBatches(examples, args.sft_batch, args.context, pad_id(tok), True, seed)
        log(f"seed {seed}: SFT on {len(examples)} demonstrations ({len(habit)} by the shortcut)")
        result = Trainer(model, SFTObjective(), batches, sft_settings, work / "sft").fit()
        out["sft"] = {"examples": len(examples), "steps": result.steps, "loss_last": result.losses[-1]}
        out["sft_checkpoint"] = str(work / "sft" / "checkpoints" / f"step-{result.steps:08d}")
    out["seconds"]["sft"] = time.perf_counter() - t0
    evaluate("sft", args.penalty)
    if args.kl_to_sft:  # the SFT merged into the base, a fresh adapter on it: adapters off = the SFT policy
        from tempering.models.lora import apply_lora

        model = apply_lora(model.merge_and_unload(), lora, MODEL)
        engine = HFEngine(model, tok, precision="auto")
    sft_state = {k: v.detach().clone() for k, v in model.state_dict().items() if "lora" in k}

    for arm in args.arms:
        model.load_state_dict(sft_state, strict=False)
        penalty = args.penalty if ARMS[arm] is None else ARMS[arm]
        episode = EpisodeSettings(max_context_tokens=args.context, unsafe_action_penalty=penalty)
        rl = AgentRLSettings(
            temperature=1.0,
            max_new_tokens=args.max_new_tokens,
            prompts_per_step=args.prompts,
            group_size=args.group,
            max_refills=args.refills,
            beta=args.kl_to_sft,
        )
        source = AgentRolloutSource(
            train, engine, renderer, sandbox, rl, episode, 1, seed, max_refills=args.refills, model=model,
            store=work / f"trajectories_{arm}.jsonl", precision="fp32",
        )  # fmt: skip
        settings = TrainSettings(
            steps=args.rl_steps,
            seed=seed,
            threads=args.threads,
            optim={"lr": args.rl_lr},
            checkpoint={"every": 10_000, "keep_last": 1},
        )
        log(f"seed {seed}: RL {arm} (penalty {penalty}) {args.rl_steps} steps")
        t0 = time.perf_counter()
        result = Trainer(model, GRPOObjective(rl), source, settings, work / f"rl_{arm}").fit()
        out["seconds"][f"rl_{arm}"] = time.perf_counter() - t0
        keys = ("success_rate", "reward_mean", "groups", "groups_kept", "groups_tied", "refill_rounds", "loss")
        out["curves"][arm + args.label] = [{k: h.get(k) for k in keys if k in h} for h in result.history]
        for i, h in enumerate(result.history):
            log(
                f"seed {seed} {arm} step {i + 1}: reward {h.get('reward_mean', 0):.2f} "
                f"success {h.get('success_rate', 0):.2f} groups kept {h.get('groups_kept')}"
            )
        evaluate(arm + args.label, penalty)
    sandbox.close()
    log(f"seed {seed}: done")


def collect(paths: list[str], headline: str) -> dict:
    """Pooled paired deltas over (task, seed) units: each RL arm (a phase other than `sft`) minus
    the SFT model of its own part file; `headline` names the arm whose figures lead."""
    from tempering.evals.stats import paired_bootstrap

    parts = [json.loads(Path(p).read_text()) for p in paths]
    arms = sorted({a for p in parts for a in p["phases"] if a != "sft"})
    rates, deltas = {}, {}
    for arm in arms:
        with_arm = [p for p in parts if arm in p["phases"]]
        units = [(p, t) for p in with_arm for t in sorted(p["phases"]["sft"])]
        res: dict = {"seeds": [p["seed"] for p in with_arm], "units": len(units)}
        for key, name in (("unsafe", "destructive"), ("success", "completion")):
            before = [float(p["phases"]["sft"][t][key]) for p, t in units]
            after = [float(p["phases"][arm][t][key]) for p, t in units]
            res[name] = paired_bootstrap(before, after).to_dict()
            res[f"{name}_rate_sft"], res[f"{name}_rate_after"] = sum(before) / len(units), sum(after) / len(units)
        res["per_seed"] = {
            str(p["seed"]): {
                phase: {
                    "destructive": sum(v["unsafe"] for v in p["phases"][phase].values()),
                    "completed": sum(v["success"] for v in p["phases"][phase].values()),
                    "tasks": len(p["phases"][phase]),
                }
                for phase in ("sft", arm)
            }
            for p in with_arm
        }
        deltas[arm] = res
        rates[arm] = {
            k: res[k]
            for k in ("destructive_rate_sft", "destructive_rate_after", "completion_rate_sft", "completion_rate_after")
        }
    ours = deltas.get(headline, {})
    return {
        "benchmark": "safe_actions: an SFT'd agent's destructive-action rate before and after GRPO",
        "model": MODEL,
        "headline": headline,
        "destructive_delta": ours.get("destructive", {}).get("delta"),
        "destructive_delta_ci_high": ours.get("destructive", {}).get("high"),
        "completion_delta": ours.get("completion", {}).get("delta"),
        "completion_delta_ci_low": ours.get("completion", {}).get("low"),
        "rates": rates,
        "arms": deltas,
        "curves": {f"{p['seed']}:{k}": v for p in parts for k, v in p["curves"].items()},
        "settings": {f"{p['seed']}:{','.join(a for a in p['phases'] if a != 'sft')}": p["settings"] for p in parts},
        "seconds": {f"{p['seed']}:{','.join(a for a in p['phases'] if a != 'sft')}": p["seconds"] for p in parts},
        "examples": {a: dict(list(parts[0]["phases"].get(a, {}).items())[:6]) for a in ("sft", *arms)},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", default="/tmp/agent_safety/s0.json")
    ap.add_argument("--collect", nargs="*", help="Only aggregate these part files.")
    ap.add_argument("--out", default=str(RESULTS / "agent_safety.json"))
    ap.add_argument("--note", default="", help="What else ran beside it (kept in the JSON).")
    ap.add_argument("--label", default="", help="Appended to the RL arm's phase name (e.g. _lr1e-3).")
    ap.add_argument("--headline", default="safe_actions", help="--collect: the arm whose figures lead.")
    ap.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--shortcut-share", type=float, default=0.75, help="Share of training tasks shown the shortcut.")
    ap.add_argument("--penalty", type=float, default=1.0, help="episode.unsafe_action_penalty of the safe_actions arm.")
    ap.add_argument("--sft-steps", type=int, default=16)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--sft-from", default=None, help="A checkpoint folder of an earlier run's SFT: start RL from it.")
    ap.add_argument(
        "--kl-to-sft",
        type=float,
        default=0.0,
        help="rl.beta with the SFT policy as the reference (merged, fresh adapter)",
    )
    ap.add_argument("--rl-steps", type=int, default=8)
    ap.add_argument("--rl-lr", type=float, default=2e-4)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--refills", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--context", type=int, default=640)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.collect:
        result = collect(args.collect, args.headline)
        result["note"] = args.note
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(
            json.dumps(
                {k: v for k, v in result.items() if not isinstance(v, dict)} | {"rates": result["rates"]}, indent=1
            )
        )
    else:
        run_seed(args)


if __name__ == "__main__":
    main()
