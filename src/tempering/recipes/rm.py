"""The reward-model recipe: pairs -> rendered sequences -> Bradley-Terry in the Trainer -> held-out accuracy.

Each side of a pair is rendered token-exactly over the shared prompt (`data/pair_render.py`)
and cut after its last answer token (`models/reward.scored_prefix`), so the score is read
at the answer's end-of-turn token. The held-out pairs are either given files or a seeded
share of the training *prompts* (all pairs of a prompt fall on one side of the split).

Held-out pairwise accuracy (a tie counts half) comes with a bootstrap CI over pairs
(`evals/stats.bootstrap_ci`) and is shown next to the data's agreement ceiling: where pairs
carry annotator votes, the share of votes agreeing with each pair's label, averaged over
pairs. An annotator agrees with the label that often, so a model scored against the same
labels is not expected to beat it by much; pairs without votes (verifier-built) have no
measured disagreement, and their ceiling is reported as null.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any

from tempering.config import RMConfig, RMDataSettings, RMSettings
from tempering.data.render import ToolCallStyle
from tempering.errors import UserError
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.runs.stage import input_list
from tempering.train.metrics import console


@dataclass
class ScoredPair:
    """A pair as token ids: the shared prompt, and each answer through its last answer token."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]
    weight: float = 1.0
    margin: float = 0.0
    prompt_key: str = ""
    """Hash of the prompt's token ids: the unit of the held-out split."""
    votes: list[str] = field(default_factory=list)
    """Each annotator's `prefers` (chosen / rejected / tie), if the row had votes."""


@dataclass
class RMData:
    train: list[ScoredPair]
    eval: list[ScoredPair]
    summary: dict[str, Any]
    errors: list[Any]


def _scored_pairs(
    paths: list[str], tokenizer: Any, cfg: RMDataSettings, rm: RMSettings, style: ToolCallStyle
) -> tuple[list[ScoredPair], Any]:
    from tempering.data.pair_render import render_pairs
    from tempering.data.preference import load_pairs
    from tempering.models.reward import scored_prefix

    loaded = load_pairs(paths)
    rendered = render_pairs(loaded, tokenizer, style, cfg.max_length)
    out = []
    for rec, r in zip(loaded.records, rendered):  # render_pairs keeps records and results in step
        pair = rec.value
        margin = rm.margin + float((pair.meta or {}).get(rm.margin_key, 0.0) if rm.margin_key else 0.0)
        out.append(
            ScoredPair(
                prompt=r.prompt_ids,
                chosen=scored_prefix(r.chosen_ids, r.chosen_mask),
                rejected=scored_prefix(r.rejected_ids, r.rejected_mask),
                weight=pair.weight if rm.use_weights else 1.0,
                margin=margin,
                prompt_key=hashlib.sha256(json.dumps(r.prompt_ids).encode()).hexdigest()[:16],
                votes=[v.prefers for v in pair.votes or []],
            )
        )
    return out, loaded


def split_by_prompt(pairs: list[ScoredPair], share: float, seed: int) -> tuple[list[ScoredPair], list[ScoredPair]]:
    """(train, held-out): a seeded `share` of distinct prompts, with all their pairs, held out."""
    keys = sorted({p.prompt_key for p in pairs})
    random.Random(seed).shuffle(keys)
    held = set(keys[: round(len(keys) * share)])
    return [p for p in pairs if p.prompt_key not in held], [p for p in pairs if p.prompt_key in held]


def prepare_rm_data(cfg: RMConfig, tokenizer: Any) -> RMData:
    """Load, validate, render and split the pairs of one reward-model stage."""
    from tempering.data.io import NoRows
    from tempering.data.render import detect_tool_call_style

    d = cfg.data
    style = detect_tool_call_style(tokenizer) if d.tool_call_style == "auto" else d.tool_call_style
    pairs, loaded = _scored_pairs(d.train, tokenizer, d, cfg.rm, style)
    errors = list(loaded.errors)
    summary: dict[str, Any] = {"rows": loaded.rows, "valid": len(pairs), "tool_call_style": style}
    if d.eval:
        train = pairs
        evals, held = _scored_pairs(d.eval, tokenizer, d, cfg.rm, style)
        errors += held.errors
        summary.update(eval_rows=held.rows, split="eval files")
    else:
        train, evals = split_by_prompt(pairs, d.eval_share, cfg.train.seed)
        summary.update(split=f"{d.eval_share:g} of prompts held out (seed {cfg.train.seed})")
    if not train:
        raise NoRows(
            f"{', '.join(d.train)}: no training pairs ({len(errors)} of {loaded.rows} rows quarantined"
            + (f"; first: {errors[0]}" if errors else "")
            + ")"
        )
    summary.update(
        train_pairs=len(train),
        eval_pairs=len(evals),
        quarantined=len(errors),
        train_prompts=len({p.prompt_key for p in train}),
        eval_prompts=len({p.prompt_key for p in evals}),
    )
    return RMData(train, evals, summary, errors)


def pair_batch(pairs: list[ScoredPair], pad_id: int) -> dict[str, Any]:
    """One shared-prompt batch (see objectives/reward.py): prompts left-padded, answers
    right-padded in the order chosen, rejected per pair, with per-pair weight and margin."""
    import torch

    from tempering.data.padding import left_pad, right_pad

    p_ids, p_mask = left_pad([p.prompt for p in pairs], pad_id)
    c_ids, c_mask = right_pad([side for p in pairs for side in (p.chosen, p.rejected)], pad_id)
    return {
        "prompt_ids": p_ids,
        "prompt_mask": p_mask,
        "completion_ids": c_ids,
        "completion_mask": c_mask,
        "weight": torch.tensor([p.weight for p in pairs], dtype=torch.float32),
        "margin": torch.tensor([p.margin for p in pairs], dtype=torch.float32),
        "n_real_tokens": int(p_mask.sum() + c_mask.sum()),
    }


def scored_fingerprint(pairs: list[ScoredPair]) -> str:
    """Hash of every pair's tokens, weight and margin: resuming on different pairs is an error."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(repr((p.prompt, p.chosen, p.rejected, p.weight, p.margin)).encode())
    return h.hexdigest()[:16]


class RewardPairBatches:
    """`BatchSource` of pair batches on the shared `EpochWalk`: a seeded order per epoch, this
    rank's stride of every global micro-batch under torchrun, exact resume with a fingerprint."""

    def __init__(
        self, pairs: list[ScoredPair], batch_size: int, pad_id: int, seed: int, shard: tuple[int, int] = (0, 1)
    ):
        from tempering.data.batches import EpochWalk

        if not pairs:
            raise UserError("no training pairs")
        self.pairs, self.pad_id, self.shard = pairs, pad_id, shard  # the Trainer checks `shard` against the world
        self.walk = EpochWalk(
            len(pairs), batch_size, seed, lambda: scored_fingerprint(pairs), shard, what="reward-model pairs"
        )

    def next_batch(self) -> dict[str, Any]:
        return pair_batch([self.pairs[i] for i in self.walk.take()], self.pad_id)

    def state_dict(self) -> dict:
        return self.walk.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.walk.load_state_dict(state)

    def stats(self) -> dict[str, float]:
        return {"epoch": self.walk.epochs}

    def consumed(self) -> list[int]:
        return self.walk.consumed()


def pair_scores(
    model: Any, pairs: list[ScoredPair], pad_id: int, batch_size: int = 16, precision: str = "auto"
) -> list[tuple[float, float]]:
    """(chosen score, rejected score) of every pair, in order."""
    from tempering.models.reward import score_ids

    was_training = model.training
    model.eval()
    chosen = score_ids(model, [p.prompt + p.chosen for p in pairs], pad_id, batch_size, precision)
    rejected = score_ids(model, [p.prompt + p.rejected for p in pairs], pad_id, batch_size, precision)
    model.train(was_training)
    return list(zip(chosen, rejected))


def pairwise_correct(scores: list[tuple[float, float]]) -> list[float]:
    """1 where chosen scored higher, 0.5 on a tie, 0 otherwise."""
    return [1.0 if c > r else 0.5 if c == r else 0.0 for c, r in scores]


def agreement_ceiling(pairs: list[ScoredPair]) -> list[float]:
    """Per pair with votes: the share of its votes agreeing with its label (a tie vote counts half)."""
    credit = {"chosen": 1.0, "tie": 0.5, "rejected": 0.0}
    return [sum(credit[v] for v in p.votes) / len(p.votes) for p in pairs if p.votes]


def heldout_report(
    model: Any, pairs: list[ScoredPair], pad_id: int, s: RMSettings, precision: str, seed: int
) -> dict[str, Any]:
    """Held-out pairwise accuracy with its bootstrap CI, and the agreement ceiling (with its CI)."""
    from tempering.evals.stats import bootstrap_ci

    scores = pair_scores(model, pairs, pad_id, s.eval_batch_size, precision)
    correct = pairwise_correct(scores)
    acc = bootstrap_ci(correct, resamples=s.bootstrap_resamples, seed=seed).to_dict()
    ceiling = agreement_ceiling(pairs)
    return {
        "accuracy": acc,
        "ceiling": bootstrap_ci(ceiling, resamples=s.bootstrap_resamples, seed=seed).to_dict() if ceiling else None,
        "ceiling_note": (
            f"share of annotator votes agreeing with the pair label, {len(ceiling)} pairs with votes"
            if ceiling
            else "no votes on the held-out pairs (e.g. verifier-built): no measured disagreement, no ceiling below 100%"
        ),
        "mean_margin": sum(c - r for c, r in scores) / len(scores),
    }


def _components(cfg: RMConfig, data: RMData, tokenizer: Any, stage: Any) -> Components:
    from tempering.data.padding import pad_id
    from tempering.models.lora import load_for_training
    from tempering.models.reward import RewardModel
    from tempering.objectives.reward import RewardObjective
    from tempering.train.distributed import world

    w = world()  # under torchrun each rank takes its stride of every global micro-batch
    if w.main:
        console.print(
            f"[dim]pairs: {data.summary['train_pairs']} train ({data.summary['train_prompts']} prompts), "
            f"{data.summary['eval_pairs']} held out ({data.summary['eval_prompts']} prompts)[/dim]"
        )
    model = RewardModel(load_for_training(cfg.model, cfg.lora, cfg.rope_scaling), seed=cfg.train.seed)
    pad = pad_id(tokenizer)
    report = lambda: heldout_report(model, data.eval, pad, cfg.rm, cfg.train.precision, cfg.train.seed)  # noqa: E731
    check = held_out(report if data.eval else None)
    batches = RewardPairBatches(data.train, cfg.train.batch_size, pad, cfg.train.seed, shard=(w.rank, w.size))
    return Components(model, RewardObjective(cfg.rm.center_coef), batches, check)


def _best_of_n(cfg: RMConfig, run_dir: Any) -> dict[str, Any]:
    """Best-of-n with the saved reward model, when the config asks for it."""
    if cfg.best_of_n is None:
        return {}
    from tempering.recipes.best_of_n import run_best_of_n

    return {
        "best_of_n": run_best_of_n(cfg.best_of_n, run_dir / "final", cfg.train.precision, run_dir / "best_of_n.jsonl")
    }


RM = TrainingRecipe(
    "rm",
    base_model=lambda cfg: cfg.model,
    inputs=lambda cfg: input_list([(p, "train") for p in cfg.data.train] + [(p, "eval") for p in cfg.data.eval]),
    train_files=lambda cfg: cfg.data.train,
    prepare=prepare_rm_data,
    components=_components,
    before_key="heldout_before",
    after_key="heldout",
    after_save=_best_of_n,
    report=lambda summary: print_report(summary),
    examples=lambda data: len(data.train),
)
"""Bradley-Terry reward model: scored pairs, held-out pairwise accuracy next to the agreement ceiling."""


def run_rm(cfg: RMConfig, force: bool = False) -> dict[str, Any]:
    """Train a reward model end to end and record it (`run_training`); returns the run summary."""
    return run_training(RM, cfg, force)


def _fmt(est: dict[str, Any] | None) -> str:
    if not est:
        return "-"
    return f"{est['mean']:.1%} [{est['low']:.1%}, {est['high']:.1%}] n={est['n']}"


def print_report(summary: dict[str, Any]) -> None:
    """The before/after table of held-out pairwise accuracy next to the agreement ceiling."""
    from rich.table import Table

    before, after = summary.get("heldout_before") or {}, summary.get("heldout") or {}
    table = Table("held-out pairs", "before", "after", title="reward model")
    table.add_row("pairwise accuracy [95% CI]", _fmt(before.get("accuracy")), _fmt(after.get("accuracy")))
    table.add_row("agreement ceiling [95% CI]", _fmt(after.get("ceiling")), _fmt(after.get("ceiling")))
    table.add_row(
        "mean score margin",
        f"{before.get('mean_margin', float('nan')):+.3f}",
        f"{after.get('mean_margin', float('nan')):+.3f}",
    )
    console.print(table)
    if after.get("ceiling") is None and after:
        console.print(f"[dim]ceiling: {after.get('ceiling_note')}[/dim]")
    bon = summary.get("best_of_n")
    if bon:
        console.print(
            f"best-of-{bon['n']} on {bon['tasks']} tasks: RM pick {bon['rm_pick']:.1%}, "
            f"random sample {bon['random_pick']:.1%}, any correct (oracle) {bon['oracle']:.1%}"
        )
