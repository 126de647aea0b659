"""The agent RL figures recomputed the task-level way of `tempering.evals.stats`, from the stored
results only (nothing is run).

    python bench/experiments/agent_rl_tasklevel.py            # rewrites the agent result files below

The stored agent RL results paired held-out outcomes by (seed, task) and bootstrapped those units as
if independent; evals resample tasks, each task's outcome averaged over its seeds first. The runs did
not keep their per-(seed, task) outcomes (`agent_rl.py` keeps them now, as `unit_outcomes`), so:

- the delta is exact: with every task run on every seed, the mean of the per-task means is the mean
  over units;
- where a figure's outcomes are all equal (0 before and after) its task-level CI is exact too;
- where the stored counts fix the per-seed changes but not which tasks changed (e.g. RL at 14 of 14
  on every seed after SFT at 14 / 10 / 10), the CI depends on how the changed units fall on tasks.
  Every arrangement the stored counts allow is enumerated (a 0/1 seeds x tasks matrix with the
  stored per-seed sums exists for a list of per-task counts iff the Gale-Ryser condition holds)
  and the result gives the range of CI ends over them, and the arrangement the docs state where
  they state one;
- a figure whose changes could go both ways (units that went from pass to fail) is not recomputed:
  its `task_level` entry says the per-unit records are missing.

Each file gets `task_level` (figure -> the task-level result, unit named) and `superseded` (figure ->
why the old interval no longer stands); the old figures stay as they were.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

RESAMPLES = 4000  # as agent_rl.py
UNIT = "task: each task's outcome averaged over its seeds, then a paired bootstrap over tasks (evals.stats)"
WHY = "bootstrapped (seed, task) units as independent; the task-level interval is in task_level"
MISSING = "per-(seed, task) outcomes not stored and units could move both ways: not recomputed"


def realizable(counts: tuple[int, ...], row_sums: list[int]) -> bool:
    """Whether a 0/1 matrix with these row sums (seeds) and column sums (tasks) exists (Gale-Ryser)."""
    rows = sorted(row_sums, reverse=True)
    if sum(rows) != sum(counts):
        return False
    return all(sum(rows[:k]) <= sum(min(c, k) for c in counts) for k in range(1, len(rows) + 1))


def count_vectors(total: int, tasks: int, cap: int) -> list[tuple[int, ...]]:
    """Every non-increasing list of `tasks` per-task counts in [0, cap] that sums to `total`."""
    return [c for c in itertools.combinations_with_replacement(range(cap, -1, -1), tasks) if sum(c) == total]


def interval(counts: tuple[int, ...], tasks: int, seeds: int) -> tuple[float, float, float]:
    """Task-level delta and CI when task i moved up on counts[i] of `seeds` seeds, the other tasks not."""
    from tempering.evals.stats import paired_bootstrap

    gains = [c / seeds for c in counts] + [0.0] * (tasks - len(counts))
    c = paired_bootstrap([0.0] * tasks, gains, resamples=RESAMPLES)
    return c.delta, c.low, c.high


def over_arrangements(arrangements: list[tuple[int, ...]], tasks: int, seeds: int, stated=None, what="") -> dict:
    """The task-level figure over every arrangement of the changed units the stored counts allow."""
    runs = {a: interval(a, tasks, seeds) for a in arrangements}
    deltas = {round(d, 12) for d, _, _ in runs.values()}
    assert len(deltas) == 1, deltas  # balanced seeds: the delta does not depend on the arrangement
    lows, highs = [lo for _, lo, _ in runs.values()], [hi for _, _, hi in runs.values()]
    out = {
        "delta": next(iter(runs.values()))[0],
        "ci_low_range": [min(lows), max(lows)],
        "ci_high_range": [min(highs), max(highs)],
        "n": tasks,
        "unit": UNIT,
        "arrangements": len(runs),
        "per_unit_records": f"not stored; {what}; the CI ends range over every arrangement of those units on tasks",
    }
    if stated is not None:
        _, lo, hi = runs[stated]
        out["as_the_docs_state"] = {"per_task_counts": [c for c in stated if c], "ci_low": lo, "ci_high": hi}
    return out


def gain_all_up(row_sums: list[int], tasks: int, what: str) -> dict:
    """A gain where no unit went down and seed s moved row_sums[s] units up."""
    total = sum(row_sums)
    arrangements = [c for c in count_vectors(total, min(total, tasks), len(row_sums)) if realizable(c, row_sums)]
    return over_arrangements(arrangements, tasks, len(row_sums), what=what)


def exact_zero(tasks: int, what: str) -> dict:
    """Every unit the same before and after: the task-level figure is exactly 0 [0, 0]."""
    return {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": tasks, "unit": UNIT, "exact": what}


def families_up(by_family: dict[str, int], tasks_per_family: int, seeds: int, tasks: int, stated=None) -> dict:
    """A gain from 0 on every unit, where only each family's number of successes is stored."""
    per_family = [count_vectors(k, min(k, tasks_per_family), seeds) for k in by_family.values()]
    arrangements = {tuple(sorted(sum(combo, ()), reverse=True)) for combo in itertools.product(*per_family)}
    what = f"0 before on every unit, after by family {by_family} of {tasks_per_family * seeds} units each"
    return over_arrangements(sorted(arrangements), tasks, seeds, stated=stated, what=what)


def tool_arith(r: dict) -> dict:
    up = "RL at 14/14 on every seed, SFT-only"
    return {
        "credit.trajectory": gain_all_up([0, 4, 4], 14, f"{up} 14/10/10 of 14: units moved up per seed 0, 4, 4"),
        "credit.step": gain_all_up([2, 0, 3], 14, f"{up} 12/14/11 of 14 (the step runs): moved up 2, 0, 3"),
        "rl_over_sft_gain_tiers_2_3": gain_all_up(
            [0, 4, 4], 27, f"tier 2 as credit.trajectory; the 13 tier-3 tasks 0 before and after ({up} 14/10/10)"
        ),
        "step_minus_trajectory": exact_zero(14, "both credits 14/14 on every seed"),
        "recovery_sampled_tool_arith.recovery_rate": exact_zero(
            27, "no episode with an error recovered, before or after"
        ),
        "completion_gain_after_recovery_sft_all_tiers": {"unit": UNIT, "per_unit_records": MISSING},
    }


def four_steps(r: dict) -> dict:
    what = "SFT-only 14/12/10 of 27, RL 14/14/14, none back: moved up 0, 2, 4"
    gain = gain_all_up([0, 2, 4], 27, what)
    return {
        "credit.trajectory": gain,
        "credit.step": gain | {"same_units_as": "credit.trajectory (the same outcome on every unit)"},
        "step_minus_trajectory": exact_zero(27, "the same outcome on every unit"),
    }


def notation(r: dict) -> dict:
    probe = families_up(
        {"divide": 21, "power": 0, "times": 0, "times-plus": 0},
        8,
        3,
        32,
        stated=(3,) * 7 + (0,),  # docs/agents.md: the same 7 division tasks on each seed
    )
    natural = families_up({"divide": 8, "power": 5, "times": 24, "times-plus": 9}, 8, 3, 32)
    first = families_up({"divide": 8, "power": 5, "times": 22, "times-plus": 11}, 8, 3, 32)
    return {
        "scripted_mixed.recovery_probe": probe,
        "scripted_mixed.completion_natural_episodes.gain_all_tiers": natural,
        "scripted_mixed.first_draw_without_probe.completion_gain_all_tiers": first,
        "scripted_mixed.recovery_rate_natural_episodes": exact_zero(32, "no episode with an error recovered"),
        "scripted.recovery_rate": exact_zero(32, "no episode with an error recovered, before or after"),
        "sampled.recovery_rate": exact_zero(32, "no episode with an error recovered, before or after"),
    }


def workspace_repo(r: dict, arith: dict, probe: dict) -> dict:
    zero = "SFT-only and RL 0 of 42 on every seed"
    return {
        "gain_sets.workspace:2,3.gain": exact_zero(21, zero),
        "gain_sets.repo:.gain": exact_zero(21, zero),
        "credit.step": exact_zero(42, zero),
        "in_distribution": {"unit": UNIT, "per_unit_records": MISSING},
        "tool_arith": arith["credit.trajectory"],
        "recovery_rate_delta": probe,
    }


def indist(r: dict) -> dict:
    return {
        "gain": {"unit": UNIT, "per_unit_records": MISSING},
        "gain_by_env": {"unit": UNIT, "per_unit_records": MISSING},
    }


def write(name: str, figures: dict) -> None:
    path = RESULTS / name
    result = json.loads(path.read_text())
    result["task_level"] = figures
    result["superseded"] = {k: WHY if "delta" in v else f"{WHY}; {MISSING}" for k, v in figures.items()}
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{name}: {len(figures)} figures")


def main() -> None:
    argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0]).parse_args()
    load = lambda name: json.loads((RESULTS / name).read_text())  # noqa: E731
    arith = tool_arith(load("agent_rl_tool_arith.json"))
    notes = notation(load("agent_recovery_notation.json"))
    write("agent_rl_tool_arith.json", arith | {"recovery": notes["scripted_mixed.recovery_probe"]})
    write("agent_rl_4steps.json", four_steps(load("agent_rl_4steps.json")))
    write("agent_recovery_notation.json", notes)
    write("agent_rl.json", workspace_repo(load("agent_rl.json"), arith, notes["scripted_mixed.recovery_probe"]))
    write("agent_rl_indist.json", indist(load("agent_rl_indist.json")))
    head = arith["credit.trajectory"]
    print(f"tool_arith trajectory: {head['delta']:+.3f}, CI low {head['ci_low_range']}, high {head['ci_high_range']}")


if __name__ == "__main__":
    main()
