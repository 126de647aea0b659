"""Bad-case reflow: the pipeline's `feedback` stage turns what went wrong into the next round's data.

Three kinds of signal come in, each recorded as an input of the run with its role, so the
lineage of the next checkpoint shows them:

  * **failed eval cases** (`evals`: eval run dirs or their `samples.jsonl`, role `failures`):
    clustered into failure modes (`evals.failures`), then *mined*: for every failed prompt,
    the `per_failure` most similar tasks of a training `pool` (TF-IDF over character
    n-grams, cosine, scikit-learn) join the next round's task set. The eval items themselves
    never become training data (that would leak the suite into training); their near
    neighbours from the training split do. Private suites carry no text and are only counted.
  * **served bad cases** (`served`: JSONL from `temper feedback export`, role `feedback`):
    thumbs-down and reports join the failure clusters; a row with a `correction` becomes a
    preference pair (the correction chosen over the served answer); a row with a `task`
    (the right answer, `{"answer": ...}`) joins the task set as a task whose id and prompt
    are the served row's (what the server recorded) and whose verifier the answer's form
    chooses (`FeedbackTask.verifier`): feedback never names a task's id, prompt or verifier.
    A bad row (not an object, no prompt, an unknown key, a task with anything but an answer)
    is quarantined in the run dir and counted, never fatal: feedback is append-only, so a
    bad row would otherwise fail every later round.
  * **preference votes** (`votes`: pairs from `temper arena export`, role `votes`): validated
    (bad rows quarantined and counted) and passed on with the corrections as `pairs`.

Outputs: `tasks` (task JSONL for a later `data.synth` / `grpo` stage), `pairs` (preference
JSONL for a `dpo` stage), `report` (counts, failure clusters, which failure each mined task
answers). Empty outputs are written too, so a round with nothing to fix still chains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tempering.atomic import write_text_atomic
from tempering.config import FeedbackConfig, TaskSourceSettings
from tempering.errors import InputNotFound, UserError
from tempering.runs.stage import StageSpec, input_list, run_stage
from tempering.types import Task

OUTPUT_FILES = {"tasks": "tasks.jsonl", "pairs": "pairs.jsonl", "report": "feedback.json"}
SERVED_KEYS = (
    "id",
    "prompt",
    "messages",
    "completion",
    "response",
    "correction",
    "kind",
    "release",
    "task",
    "meta",
    "comment",
    "rating",
    "created_at",
    "request_id",
)


def feedback_stage(cfg: FeedbackConfig) -> StageSpec:
    files = (
        [(p, "failures") for p in cfg.evals] + [(p, "feedback") for p in cfg.served] + [(p, "votes") for p in cfg.votes]
    )
    if cfg.pool is not None and Path(cfg.pool.source).exists():
        files.append((cfg.pool.source, "pool"))
    return StageSpec("feedback", cfg.out, cfg.name, cfg.model_dump(), input_list(files), None, 1, cfg.seed)


def run_feedback(cfg: FeedbackConfig) -> dict[str, Any]:
    """Read the signals, cluster, mine, convert; write tasks / pairs / report; recorded as a run."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.data.io import write_quarantine

    with run_stage(feedback_stage(cfg)) as stage:
        if stage.finished:
            return stage.summary
        failures, private = read_eval_failures(cfg.evals)
        served, served_tasks, corrections, served_bad, served_errors = read_served(cfg.served)
        if served_errors:
            write_quarantine(served_errors, stage.run_dir / "served.quarantine.jsonl")
        votes, quarantined = read_votes(cfg.votes, stage.run_dir)
        cases = failures + served_bad
        clusters = cluster(cases, cfg)
        mined, why = mine(cases, cfg.pool, cfg.per_failure) if cfg.pool is not None else ([], [])
        tasks = _unique(served_tasks + mined)[: cfg.max_tasks]
        pairs = corrections + votes
        outputs = {key: stage.run_dir / name for key, name in OUTPUT_FILES.items()}
        write_jsonl_atomic(outputs["tasks"], [t.model_dump(exclude_none=True) for t in tasks], sidecar=True)
        write_jsonl_atomic(outputs["pairs"], pairs, sidecar=True)
        counts = {
            "eval_failures": len(failures),
            "private_failures": private,
            "served_rows": served,
            "served_quarantined": len(served_errors),
            "served_bad_cases": len(served_bad),
            "served_tasks": len(served_tasks),
            "corrections": len(corrections),
            "votes": len(votes),
            "votes_quarantined": quarantined,
            "mined_tasks": len(mined),
            "tasks": len(tasks),
            "pairs": len(pairs),
        }
        write_text_atomic(
            outputs["report"],
            json.dumps(
                {**counts, "clusters": clusters.get("clusters", []), "mined_for": why[: len(tasks)]},
                indent=1,
                ensure_ascii=False,
            ),
        )
        for key, path in outputs.items():
            stage.record_output(key, path)
        stage.finish(
            {"steps": 1, **counts, "failure_modes": [(c["label"], c["size"]) for c in clusters.get("clusters", [])]},
            {k: str(v) for k, v in outputs.items()},
        )
    return stage.summary


# ------------------------------------------------------------------ reading the signals
def read_eval_failures(paths: Sequence[str]) -> tuple[list[Any], int]:
    """Failed samples of eval runs (an eval stage's results.json, its run dir, or samples.jsonl).

    Returns (cases with prompt text, count of private cases without text).
    """
    from tempering.evals.failures import read_failures

    cases, private = [], 0
    for p in paths:
        path = Path(p)
        if path.is_file() and path.suffix == ".json":  # results.json: its samples are next to it
            path = path.parent
        samples = sorted(path.rglob("samples.jsonl")) if path.is_dir() else [path]
        if not samples:
            raise InputNotFound(f"{p}: no samples.jsonl (an eval run dir or its results.json)")
        for f in samples:
            for case in read_failures(f):
                if case.prompt:
                    cases.append(case)
                else:
                    private += 1
    return cases, private


def read_served(
    paths: Sequence[str],
) -> tuple[int, list[Task], list[dict[str, Any]], list[Any], list[Any]]:
    """Rows of `temper feedback export`: (rows, verifiable tasks, correction pairs, bad cases,
    quarantined rows as `RowError`s naming file, line and reason)."""
    from tempering.data.io import RowError, iter_rows

    rows, tasks, pairs, bad, errors = 0, [], [], [], []
    for p in paths:
        for where, row, error in iter_rows(Path(p)):
            rows += 1
            try:
                if error is not None:
                    raise ValueError(str(error))
                task, pair, case = _served_row(row, f"{Path(p).name}:{where}")
            except ValueError as exc:  # pydantic's ValidationError is one
                errors.append(RowError(str(p), where, _reason(exc), row))
                continue
            tasks += [task] if task else []
            pairs += [pair] if pair else []
            bad += [case] if case else []
    return rows, tasks, pairs, bad, errors


def _reason(exc: ValueError) -> str:
    """One line: pydantic's errors as `field: message`, else the error's own text."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "task " + "; ".join(f"{'.'.join(map(str, e['loc'])) or '-'}: {e['msg']}" for e in exc.errors())
    return str(exc)


def _served_row(row: Any, where: str) -> tuple[Task | None, dict[str, Any] | None, Any]:
    """(task, correction pair, bad case) of one served row; ValueError for a bad row."""
    from tempering.evals.failures import case_from_row
    from tempering.serve.protocol import FeedbackTask

    if not isinstance(row, dict) or not (row.get("prompt") or row.get("messages")):
        raise UserError("a feedback row needs 'prompt' or 'messages'")
    unknown = set(row) - set(SERVED_KEYS)
    if unknown:
        raise UserError(f"unknown key(s) {', '.join(sorted(unknown))}")
    prompt = row.get("messages") or row["prompt"]
    answer = row.get("completion", row.get("response")) or ""
    rid = str(row.get("id") or where)
    task = pair = case = None
    if row.get("task"):
        check = FeedbackTask.model_validate(row["task"])  # an answer only: no id, prompt or verifier
        task = Task.model_validate(
            {"id": f"feedback-{rid}", **_prompt_field(prompt), "verifier": check.verifier(), "source": "feedback"}
        )
    if row.get("correction"):
        pair = {
            "prompt": prompt,
            "chosen": row["correction"],
            "rejected": answer,
            "source": "human",
            "meta": {"feedback_id": rid, "release": row.get("release")},
        }
    if row.get("kind", "thumbs_down") != "thumbs_up":
        case = case_from_row(
            {"task_id": f"feedback-{rid}", "prompt": prompt, "completion": answer, "detail": row.get("comment")}
        )
    return task, pair, case


def _prompt_field(prompt: Any) -> dict[str, Any]:
    return {"prompt": prompt} if isinstance(prompt, str) else {"messages": prompt}


def read_votes(paths: Sequence[str], run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """Validated preference rows of `temper arena export`; bad rows quarantined in the run dir."""
    from tempering.data.io import write_quarantine
    from tempering.data.preference import load_pairs

    if not paths:
        return [], 0
    loaded = load_pairs(list(paths))
    if loaded.errors:
        write_quarantine(loaded.errors, run_dir / "votes.quarantine.jsonl")
    return [r.value.model_dump(exclude_none=True) for r in loaded.records], len(loaded.errors)


# ------------------------------------------------------------------ clustering and mining
def cluster(cases: Sequence[Any], cfg: FeedbackConfig) -> dict[str, Any]:
    """Failure modes of the bad cases (k chosen by silhouette unless `clusters` is set)."""
    from tempering.evals.failures import cluster_failures

    if len(cases) < 3:  # too few to cluster: one group
        return {"failures": len(cases), "clusters": [{"label": "all", "size": len(cases)}] if cases else []}
    k = min(cfg.clusters, len(cases)) if cfg.clusters else None
    return cluster_failures(cases, k=k, seed=cfg.seed)


def mine(cases: Sequence[Any], source: TaskSourceSettings, per_failure: int) -> tuple[list[Task], list[dict[str, Any]]]:
    """For each failed prompt, its `per_failure` nearest tasks of the pool `source` (character n-gram TF-IDF, cosine).

    Returns the tasks (first-come order, no repeats) and, per task, which failure it was mined for.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.neighbors import NearestNeighbors

    from tempering.sources.tasks import load_tasks

    if not cases:
        return [], []
    pool = load_tasks(source)
    failed_prompts = {c.prompt for c in cases}
    pool = [t for t in pool if _text(t) not in failed_prompts]  # never the failed item itself
    if not pool:
        return [], []
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True)
    x = vec.fit_transform([_text(t) for t in pool])
    nn = NearestNeighbors(n_neighbors=min(per_failure, len(pool)), metric="cosine").fit(x)
    dist, idx = nn.kneighbors(vec.transform([c.prompt for c in cases]))
    tasks, why, seen = [], [], set()
    for case, ds, ids in zip(cases, dist, idx):
        for d, i in zip(ds, ids):
            if i in seen:
                continue
            seen.add(i)
            tasks.append(pool[i])
            why.append({"task_id": pool[i].id, "for": case.task_id, "similarity": round(1.0 - float(d), 4)})
    return tasks, why


def _text(task: Task) -> str:
    return task.prompt if task.prompt is not None else "\n".join(m["content"] or "" for m in task.chat())


def _unique(tasks: Sequence[Task]) -> list[Task]:
    seen, out = set(), []
    for t in tasks:
        if t.id not in seen:
            seen.add(t.id)
            out.append(t)
    return out
