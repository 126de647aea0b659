"""Multi-track pipelines: specialist tracks from one base, merged, gated, and rebalanced.

A pipeline's `tracks:` names, per track, its training stages (the last one's `final` is what
the merge takes), its own suites and its merge weight; `rebalance:` names the merge stage and
the gate after it, and the budget:

    tracks:
      add:   {stages: [add_sft], suites: [add], weight: 1.0}
      spell: {stages: [spell_sft], suites: [spell], weight: 1.0, replay: 0.2}
    rebalance: {merge: merged, gate: gate, max_attempts: 3, replay: {data: general.jsonl, ratio: 0.3}}

An attempt is the plan with the tracks' current state written into it: the merge stage's
`weights` are the tracks' weights, and a track with replay > 0 has `data.replay` (the general
files at that share of its training examples: SFT's own forgetting guard) in each of its stages
that takes it. When the gate rejects the merged model, `rebalance_step` reads which rules failed:

- a rule on any other suite (a general regression) and a track without replay that can take it:
  every such track gets `rebalance.replay.ratio`, and nothing else changes this attempt (replay
  changes the tracks' deltas, so their own scores are measured again before any reweighting);
- otherwise a rule on a track's own suite multiplies that track's merge weight by `reweight`,
  and a general regression divides every weight by `reweight` (the merged model moves back
  toward the base).

The next attempt is the same pipeline again: unchanged stages are cached by their content hash
(a track whose data and settings did not change is not retrained).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempering.config import PipelineConfig, RebalanceSettings, TrackSettings
from tempering.errors import UserError


class TracksError(UserError):
    """A `tracks:` / `rebalance:` section that cannot run; one line naming the key."""


@dataclass
class TracksPlan:
    """The validated tracks of a pipeline and the stages as declared (before any attempt's rewrite)."""

    tracks: dict[str, TrackSettings]
    rebalance: RebalanceSettings
    declared: list[Any]  # PlannedStage, as the file declares them

    def initial_state(self) -> dict[str, TrackState]:
        return {name: TrackState(t.weight, t.replay) for name, t in self.tracks.items()}


@dataclass
class TrackState:
    """What rebalancing changes about one track: its merge weight and its replay share."""

    weight: float
    replay: float

    def to_dict(self) -> dict[str, float]:
        return {"weight": round(self.weight, 6), "replay": round(self.replay, 6)}


@dataclass
class Decision:
    """One rebalancing step: the next state and what changed, in words."""

    state: dict[str, TrackState]
    actions: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ validation
def check_tracks(cfg: PipelineConfig, stages: list[Any]) -> TracksPlan | None:
    """Check `tracks:` and `rebalance:` against the stages; None when the pipeline has no tracks.

    Raises:
        TracksError: empty tracks, a track naming an unknown or non-training stage, a stage in
            two tracks, weights summing to 0, a merge stage whose inputs are not the tracks'
            finals (or that sets its own weights), a gate that is not after the merge.
    """
    from tempering.recipes.registry import load_plugins

    if cfg.tracks is None:
        if cfg.rebalance is not None:
            raise TracksError("rebalance: needs tracks: (the specialist tracks it rebalances)")
        return None
    if not cfg.tracks:
        raise TracksError("tracks: empty; name at least one track with its training stages")
    if cfg.rebalance is None:
        raise TracksError("tracks: needs rebalance: {merge: <merge stage>, gate: <gate stage>}")
    by_name = {s.name: (i, s) for i, s in enumerate(stages)}
    training = set(load_plugins())
    owner: dict[str, str] = {}
    for track, settings in cfg.tracks.items():
        for name in settings.stages:
            if name not in by_name:
                raise TracksError(f"tracks.{track}.stages: unknown stage {name!r} (stages: {', '.join(by_name)})")
            kind = by_name[name][1].kind
            if kind not in training:
                raise TracksError(
                    f"tracks.{track}.stages: stage {name!r} is a {kind!r} stage, not a training stage "
                    f"({', '.join(sorted(training))})"
                )
            if name in owner:
                raise TracksError(f"tracks.{track}.stages: stage {name!r} is already in track {owner[name]!r}")
            owner[name] = track
            data = by_name[name][1].keys.get("data")
            if isinstance(data, dict) and data.get("replay") is not None:
                raise TracksError(
                    f"stage {name!r}: data.replay: set by tracks.{track}.replay and rebalance.replay; remove it"
                )
        if settings.replay > 0 and cfg.rebalance.replay is None:
            raise TracksError(f"tracks.{track}.replay: {settings.replay} needs rebalance.replay.data to mix in")
    if sum(t.weight for t in cfg.tracks.values()) <= 0:
        raise TracksError("tracks: the weights sum to 0; give at least one track a weight > 0")
    merge_at = _check_merge(cfg, by_name)
    gate = by_name.get(cfg.rebalance.gate)
    if gate is None or gate[1].kind != "gate":
        raise TracksError(f"rebalance.gate: {cfg.rebalance.gate!r} is not a gate stage of this pipeline")
    if gate[0] < merge_at:
        raise TracksError(f"rebalance.gate: stage {cfg.rebalance.gate!r} runs before the merge; it must judge it")
    return TracksPlan(dict(cfg.tracks), cfg.rebalance, list(stages))


def _check_merge(cfg: PipelineConfig, by_name: dict[str, tuple[int, Any]]) -> int:
    assert cfg.tracks is not None and cfg.rebalance is not None
    name = cfg.rebalance.merge
    if name not in by_name or by_name[name][1].kind != "merge":
        raise TracksError(f"rebalance.merge: {name!r} is not a merge stage of this pipeline")
    at, stage = by_name[name]
    want = [f"${{{t.stages[-1]}.final}}" for t in cfg.tracks.values()]
    if stage.keys.get("inputs") != want:
        raise TracksError(
            f"rebalance.merge: stage {name!r} must merge the tracks' last stages in track order: "
            f"inputs: [{', '.join(want)}]"
        )
    if stage.keys.get("weights") is not None:
        raise TracksError(f"stage {name!r}: weights: set by tracks.<name>.weight; remove it")
    return at


# ------------------------------------------------------------------ an attempt's stages
def attempt_stages(plan: TracksPlan, state: dict[str, TrackState]) -> list[Any]:
    """The declared stages with `state` written in: merge weights, and replay in each track stage that takes it."""
    out: list[Any] = []
    replay_in = {
        name: state[track].replay
        for track, settings in plan.tracks.items()
        if state[track].replay > 0
        for name in settings.stages
        if _takes_replay(_declared(plan, name))
    }
    weights = [state[t].weight for t in plan.tracks]
    for stage in plan.declared:
        stage = copy.deepcopy(stage)
        if stage.name in replay_in:
            assert plan.rebalance.replay is not None
            ratio = replay_in[stage.name]
            stage.keys["data"]["replay"] = {"data": list(plan.rebalance.replay.data), "ratio": ratio}
        if stage.name == plan.rebalance.merge:
            stage.keys["weights"] = weights
        out.append(stage)
    return out


def _declared(plan: TracksPlan, name: str) -> Any:
    return next(s for s in plan.declared if s.name == name)


def _takes_replay(stage: Any) -> bool:
    """A stage whose `data` settings have `replay` (SFT's `data.replay`: general rows at a share of the data)."""
    data = stage.spec.config.model_fields.get("data")
    kind = getattr(data, "annotation", None) if data is not None else None
    return isinstance(kind, type) and "replay" in getattr(kind, "model_fields", {})


def can_replay(plan: TracksPlan, track: str) -> bool:
    return plan.rebalance.replay is not None and any(
        _takes_replay(_declared(plan, s)) for s in plan.tracks[track].stages
    )


# ------------------------------------------------------------------ rebalancing
def failed_suites(verdict: dict[str, Any]) -> list[set[str]]:
    """Per failed rule of a gate verdict, the names it reads (a suite, a track, or `suite.metric`'s
    suite; `<suite>@<length>` reads its suite)."""
    from tempering.evals.gate import MetricRule, NonInferiorityRule, RegressionRule, parse_rule, suite_of

    out = []
    for rule in verdict.get("rules", []):
        if rule.get("passed"):
            continue
        parsed = parse_rule(rule["rule"])
        if isinstance(parsed, MetricRule):
            out.append({suite_of(parsed.suite)})
        elif isinstance(parsed, (RegressionRule, NonInferiorityRule)):  # the rules naming a suite or track
            name = parsed.name
            out.append({name, suite_of(name.rsplit(".", 1)[0])})
        else:
            out.append(set())  # contamination: no track to rebalance
    return out


def rebalance_step(plan: TracksPlan, state: dict[str, TrackState], verdict: dict[str, Any]) -> Decision:
    """The next attempt's state after a rejected verdict, and the actions taken (none: nothing to try)."""
    settings = plan.rebalance
    nxt = {t: TrackState(s.weight, s.replay) for t, s in state.items()}
    actions: list[str] = []
    general = False
    regressed: list[str] = []
    for names in failed_suites(verdict):
        owners = [t for t, ts in plan.tracks.items() if names & set(ts.suites)]
        if owners:
            regressed += [t for t in owners if t not in regressed]
        elif names:
            general = True
    fresh = [t for t in plan.tracks if nxt[t].replay == 0 and can_replay(plan, t)] if general else []
    if fresh:  # replay first: it changes the deltas, so the tracks' own scores are measured again before reweighting
        assert settings.replay is not None
        for track in fresh:
            nxt[track].replay = settings.replay.ratio
            actions.append(
                f"{track}: a general suite regressed; re-mixed with {settings.replay.ratio:g} general replay "
                f"({', '.join(Path(p).name for p in settings.replay.data)})"
            )
        return Decision(nxt, actions)
    for track in regressed:
        old = nxt[track].weight
        nxt[track].weight = old * settings.reweight if old > 0 else 1.0
        actions.append(f"{track}: its own suite regressed; merge weight {old:g} -> {nxt[track].weight:g}")
    if general:
        for track in plan.tracks:
            old = nxt[track].weight
            nxt[track].weight = old / settings.reweight
            actions.append(f"{track}: a general suite regressed; merge weight {old:g} -> {nxt[track].weight:g}")
    return Decision(nxt, actions)
