"""Verifier-built preference pairs: a model's own samples, judged by the task's verifier.

    temper data pairs --out pairs.jsonl --n 400 --k 8           # builtin arithmetic, default model

For each task, `k` candidates are sampled and scored through the one rollout path
(`rollout.rollout`), under one composite verifier: the task's own spec (`correct`) plus
the `strict` specs (default: the exact answer, and nothing but a number). Each candidate is
then one of

    strict   correct, and passes every strict spec          ("92")
    sloppy   correct, not strict                            ("25 + 67 = 92")
    wrong    scored, not correct                            ("25 + 67 = 124")

(a candidate the verifier could not judge is none of them and never paired). Pairs:

    correct  chosen: a correct candidate (strict first)  -- rejected: a wrong one
    strict   chosen: a strict candidate                  -- rejected: a sloppy one first, then wrong ones

A chosen reply is never a truncated one (it would teach the model not to stop). When no
candidate of a task is strict and `reformat` is on, the strict reply is built from a correct
candidate's own final answer reduced to the bare number (never from the task's hidden
answer), and is re-scored by the same verifier before use (`chosen_origin: reformatted`).
The default model almost never answers with a bare number, so without this there would be
no strict pairs at all.

Every row follows the shared pair contract (`prompt`, `chosen`, `rejected`, `source:
verifier`, `weight`, `meta`) with provenance in `meta`: generator (model spec and weight
hash), sampling settings, verifier specs, each side's scores and sample index.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from tempering.config import PairsConfig
from tempering.runs.stage import StageSpec, input_list, run_stage
from tempering.types import Task, Trajectory

Label = Literal["strict", "sloppy", "wrong"]


@dataclass
class Candidate:
    """One scored sample of a task."""

    index: int
    text: str
    label: Label
    truncated: bool
    components: dict[str, float]
    origin: str = "sampled"


def pair_verifier(base: dict[str, Any], strict: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The composite spec a candidate is scored with: `correct` (the task's own) + `strict<i>`."""
    parts = [{"name": "correct", "weight": 1.0, "verifier": base}]
    parts += [{"name": f"strict{i}", "weight": 1.0, "verifier": {**base, **s}} for i, s in enumerate(strict)]
    return {"type": "composite", "parts": parts}


def label_of(components: dict[str, float], n_strict: int) -> Label:
    """strict / sloppy / wrong from the composite's components (a part passes at 1.0)."""
    if components.get("correct", 0.0) < 1.0:
        return "wrong"
    return "strict" if all(components.get(f"strict{i}", 0.0) >= 1.0 for i in range(n_strict)) else "sloppy"


def candidates(trajectories: Sequence[Trajectory], n_strict: int) -> list[Candidate]:
    """The judged samples of one task. A verifier error or timeout is dropped (not called wrong),
    and so is an empty reply (a pair row needs text on both sides)."""
    return [
        Candidate(
            t.sample,
            t.completion,
            label_of(t.reward.components, n_strict),
            t.finish_reason == "length",
            dict(t.reward.components),
        )
        for t in trajectories
        if t.scored and t.completion.strip()
    ]


def bare_answer(text: str) -> str | None:
    """A correct reply's own final answer as a bare number ("25 + 67 = 92." -> "92"), or None."""
    from tempering.numbers import parse_number
    from tempering.verifiers.answers import extract_final_answer

    value = parse_number(extract_final_answer(text))
    if value is None:
        return None
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def reformatted(task: Task, pool: Sequence[Candidate], n_strict: int) -> Candidate | None:
    """A strict reply built from the first correct candidate whose bare answer verifies as strict."""
    from tempering.rollout.rollout import judge

    for cand in pool:
        text = bare_answer(cand.text)
        if text is None:
            continue
        verdict = judge(task, text)
        if verdict.status == "scored" and label_of(verdict.reward.components, n_strict) == "strict":
            return Candidate(cand.index, text, "strict", False, dict(verdict.reward.components), "reformatted")
    return None


def choose_pairs(
    task: Task,
    cands: list[Candidate],
    kinds: Sequence[str],
    per_kind: int,
    reformat: bool,
    n_strict: int,
    rng: random.Random,
) -> list[tuple[str, Candidate, Candidate]]:
    """(kind, chosen, rejected) triples of one task; texts of a pair always differ."""
    by = {lab: [c for c in cands if c.label == lab] for lab in ("strict", "sloppy", "wrong")}
    for group in by.values():
        rng.shuffle(group)
    complete = [c for c in by["strict"] + by["sloppy"] if not c.truncated]  # chosen replies must stop
    out: list[tuple[str, Candidate, Candidate]] = []
    if "correct" in kinds and complete:
        out += _pairs("correct", complete, _distinct(by["wrong"]), per_kind)
    if "strict" in kinds:
        strict = [c for c in by["strict"] if not c.truncated]
        if not strict and reformat:
            made = reformatted(task, by["sloppy"], n_strict)  # a cut-off reply's verified answer is still its own
            strict = [made] if made is not None else []
        if strict:
            out += _pairs("strict", strict, _distinct(by["sloppy"] + by["wrong"]), per_kind)
    return out


def _distinct(cands: list[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    kept = []
    for c in cands:
        if c.text.strip() not in seen:
            seen.add(c.text.strip())
            kept.append(c)
    return kept


def _pairs(
    kind: str, chosen: list[Candidate], rejected: list[Candidate], per_kind: int
) -> list[tuple[str, Candidate, Candidate]]:
    """Up to `per_kind` pairs, each with its own rejected candidate, chosen ones taken in turn."""
    out = []
    for rej in rejected:
        if len(out) == per_kind:
            break
        pick = next((c for c in chosen[len(out) % len(chosen) :] + chosen if c.text.strip() != rej.text.strip()), None)
        if pick is not None:
            out.append((kind, pick, rej))
    return out


def pair_row(task: Task, kind: str, chosen: Candidate, rejected: Candidate, provenance: dict[str, Any]) -> dict:
    """One row of the shared pair contract."""
    messages = task.chat()
    prompt: Any = messages[0]["content"] if len(messages) == 1 and messages[0]["role"] == "user" else messages
    return {
        "prompt": prompt,
        "chosen": chosen.text,
        "rejected": rejected.text,
        "source": "verifier",
        "weight": 1.0,
        "meta": {
            "task_id": task.id,
            "kind": kind,
            "chosen_origin": chosen.origin,
            "chosen_label": chosen.label,
            "rejected_label": rejected.label,
            "samples": {"chosen": chosen.index, "rejected": rejected.index},
            "scores": {"chosen": chosen.components, "rejected": rejected.components},
            **provenance,
        },
    }


def build_pairs(
    tasks: Sequence[Task], engine: Any, cfg: PairsConfig, workers: Any, progress: Any = None
) -> tuple[list[dict], dict[str, Any]]:
    """Sample, score and pair; returns (rows, counts). `progress(done_tasks)` after each chunk."""
    from tempering.rollout.rollout import rollout

    n_strict = len(cfg.strict)
    judged = [t.model_copy(update={"verifier": pair_verifier(t.verifier, cfg.strict)}) for t in tasks]
    provenance = {
        "generator": {"model": cfg.model, "identity": engine.identity, "precision": engine.precision},
        "sampling": {**cfg.sampling.model_dump(mode="json"), "k": cfg.k, "seed": cfg.seed},
        "verifier": {"strict": cfg.strict, "reformat": cfg.reformat},
    }
    rng = random.Random(cfg.seed)
    rows: list[dict] = []
    counts = {
        "tasks": len(tasks),
        "samples": 0,
        "judged": 0,
        "strict": 0,
        "sloppy": 0,
        "wrong": 0,
        "tasks_with_correct": 0,
        "tasks_with_strict_sample": 0,
        "tasks_paired": 0,
        "reformatted": 0,
        "pairs_correct": 0,
        "pairs_strict": 0,
    }
    for chunk, start in enumerate(range(0, len(judged), cfg.chunk_tasks)):
        part = judged[start : start + cfg.chunk_tasks]
        groups = rollout(part, engine, cfg.sampling, workers, n=cfg.k, seed=cfg.seed + chunk)
        for task, group in zip(part, groups):
            cands = candidates(group, n_strict)
            _count(counts, group, cands)
            made = choose_pairs(task, cands, cfg.kinds, cfg.pairs_per_kind, cfg.reformat, n_strict, rng)
            counts["tasks_paired"] += bool(made)
            for kind, chosen, rejected in made:
                counts[f"pairs_{kind}"] += 1
                counts["reformatted"] += chosen.origin == "reformatted"
                verifier = {**provenance["verifier"], "task": task.verifier["parts"][0]["verifier"]}
                rows.append(pair_row(task, kind, chosen, rejected, {**provenance, "verifier": verifier}))
        if progress is not None:
            progress(start + len(part))
    counts["pairs"] = len(rows)
    return rows, counts


def _count(counts: dict[str, Any], group: Sequence[Trajectory], cands: list[Candidate]) -> None:
    counts["samples"] += len(group)
    counts["judged"] += len(cands)
    for c in cands:
        counts[c.label] += 1
    counts["tasks_with_correct"] += any(c.label != "wrong" for c in cands)
    counts["tasks_with_strict_sample"] += any(c.label == "strict" for c in cands)


def write_jsonl(rows: Sequence[dict], path: str | Path) -> Path:
    """Write rows to `path` atomically (`tempering.atomic`, no checksum sidecar)."""
    from tempering.atomic import write_jsonl_atomic

    write_jsonl_atomic(path, rows, sidecar=False)
    return Path(path)


def run_pairs(cfg: PairsConfig, console: Any = None, force: bool = False) -> dict[str, Any]:
    """Build pairs from `cfg.model`'s samples on `cfg.tasks`, write `cfg.output`, record the run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tempering.rollout.rollout import ThreadRewardWorkers
    from tempering.rollout.select import load_engine
    from tempering.sources.tasks import load_tasks
    from tempering.train.metrics import console as default_console

    console = console or default_console
    tasks = load_tasks(cfg.tasks)
    spec = StageSpec(
        "pairs",
        cfg.out,
        cfg.name,
        cfg.model_dump(mode="json"),
        input_list([(cfg.tasks.source, "tasks")]),
        cfg.model,
        1,
        cfg.seed,
        cfg.threads,
        force,
    )
    with run_stage(spec) as stage:
        if stage.finished:
            return stage.summary
        t0 = time.perf_counter()
        engine = load_engine(cfg.engine, cfg.model, cfg.precision)
        columns = (TextColumn("pairs"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeRemainingColumn())
        with (
            Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar,
            ThreadRewardWorkers(4) as workers,
        ):
            job = bar.add_task("sample", total=len(tasks))

            def progress(done: int) -> None:  # piped or redirected: one plain line per batch, not a redrawn bar
                bar.update(job, completed=done)
                if not console.is_terminal:
                    console.print(f"pairs: {done}/{len(tasks)} tasks sampled ({time.perf_counter() - t0:.0f} s)")

            rows, counts = build_pairs(tasks, engine, cfg, workers, progress)
        path = write_jsonl(rows, cfg.output)
        stage.record_output("pairs", path)
        stage.finish(
            {"steps": 1, **counts, "output": str(path), "seconds": round(time.perf_counter() - t0, 1)},
            {"pairs": str(path.resolve())},
        )
    return stage.summary
