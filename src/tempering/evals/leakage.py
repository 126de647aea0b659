"""Eval tasks leaking into training: a checkpoint's lineage scan, and the private-suite guard.

Lineage. Every output dir of a run (its `final/`, an export or merge of it) carries a marker
naming its registry and run (`pipeline.registry`); the registry records each input with its
role and, for a base model that is another run's output, that parent run. So the files that
trained a checkpoint are one query over roles (`train`, `replay`, `tasks`; `eval` and
`heldout` files are not training data), whatever recipe wrote it. Only the runs that made
the weights count: the run that wrote the checkpoint and the runs of its base models
(exports, merges, earlier stages). A data pass upstream of a training file (dedup,
decontam, mix, feedback) is lineage too, but the model never read its inputs: it read the
pass's output, after every filter, and that file is what is scanned. Every such file is
scanned with the suites' n-gram index (`evals.contamination`); the rows found become the
suite result's `contaminated_rows`, which the gate rule `contamination == 0` reads.
A row that cannot be read (training quarantined it too) is skipped and counted in
`LeakScan.quarantined`, never raised: one bad line must not stop an eval.

Recorded paths are relative to where training ran; they are looked up from the current
directory, then from the run root's parent and the run root. A file that is missing, or
whose sha256 differs from the recorded one, is reported in `Lineage.missing` / `changed`
(the caller warns): the scan can only read what is still there.

Private guard. `check_private_overlap(paths)` refuses training data that holds any task of
a private suite (every private suite among the registered ones, see `evals.suite`); the
error names suites and training rows, never task text. SFT calls it before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from tempering.data.io import RowError
from tempering.errors import UserError
from tempering.evals.contamination import Hit, NgramIndex
from tempering.evals.suite import Suite, registered_suites
from tempering.hashing import sha256_file
from tempering.types import Task

if TYPE_CHECKING:
    from tempering.runs.registry import LineageRow

SHOWN_ROWS = 5


class PrivateSuiteOverlap(UserError):
    """Training data contains tasks of a private eval suite."""


@dataclass
class Lineage:
    """The runs behind a checkpoint and the training files they recorded."""

    runs: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def suite_index(suites: Iterable[Suite]) -> NgramIndex:
    """One n-gram index over the tasks of `suites` (private ones stay private)."""
    index = NgramIndex()
    for suite in suites:
        index.add_tasks(suite.name, _task_rows(suite.task_list), private=suite.private)
    return index


def _task_rows(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    return [t.model_dump(include={"id", "prompt", "messages"}, exclude_none=True) for t in tasks]


# ---------------------------------------------------------------------------- lineage


def find_run(model_path: str | Path) -> tuple[Path | str, dict[str, Any]] | None:
    """(registry file or URL, run record) of the run that wrote `model_path`, if any.

    Read from the marker file every output dir carries (`tempering-run.json`, written by the
    stage runner and by `temper export`), or, for a checkpoint dir `<run>/checkpoints/step-N`,
    the run dir's marker; any spelling of a model (`runs/NAME@best` is `runs/NAME/best`,
    `runs.registry.model_marker`). Nothing is guessed from parent directories.
    """
    from tempering.runs.registry import Registry, is_url, model_dir, model_marker, registry_exists

    if not model_dir(model_path).is_dir():
        return None
    marker = model_marker(model_path)
    if marker is None or not registry_exists(marker["registry"]):
        return None
    registry = Registry(marker["registry"])
    try:  # a PostgreSQL registry is named by its URL, an SQLite one by its file
        return (marker["registry"] if is_url(marker["registry"]) else Path(marker["registry"])), registry.get(
            marker["run_id"]
        )
    except KeyError:
        return None
    finally:
        registry.close()


def _locate(recorded: str, root: Path) -> list[Path]:
    p = Path(recorded)
    if p.is_absolute():
        return [p]
    return [Path.cwd() / p, root.parent / p, root / p]


def training_lineage(model_path: str | Path) -> Lineage:
    """The runs and training files behind a checkpoint, through base models, exports and merges.

    One registry query (`Registry.lineage`) gives every input of the run and of its
    ancestors with its role; of those, the runs that made the weights (`weight_runs`) keep
    their files in training roles. A base model that lives in another run root (its marker
    names another registry) continues the walk there.
    """
    from tempering.runs.registry import TRAINING_ROLES, Registry

    lineage, seen, todo = Lineage(), set(), [str(model_path)]
    while todo:
        found = find_run(todo.pop())
        if found is None or found[1]["id"] in seen:
            continue
        db, run = found
        registry = Registry(db)
        try:
            rows = registry.lineage(run["id"])
        finally:
            registry.close()
        trained = weight_runs(run["id"], rows)
        for row in rows:
            if row.run_id not in trained:  # a data pass: the model read its output, not its inputs
                continue
            if row.run_id not in seen:
                seen.add(row.run_id)
                if row.run_name not in lineage.runs:  # a resumed run appears once
                    lineage.runs.append(row.run_name)
            if row.role in TRAINING_ROLES and row.path:
                _add_file(lineage, row.path, row.sha256, _root(db))
            elif row.role == "base_model" and row.path:
                todo += _elsewhere(row.path, db)
    return lineage


def weight_runs(run_id: str, rows: Sequence[LineageRow]) -> set[str]:
    """The runs of `rows` whose weights lead to run `run_id`'s model: it and, recursively, the
    runs that wrote its `base_model` inputs (data passes are reached through data inputs only)."""
    runs, grew = {run_id}, True
    while grew:
        linked = {r.parent_run for r in rows if r.run_id in runs and r.role == "base_model" and r.parent_run}
        grew = not linked <= runs
        runs |= linked
    return runs


def _root(db: Path | str) -> Path:
    """Where relative input paths of a registry's runs are looked up: its run root (SQLite), else here."""
    return db.parent if isinstance(db, Path) else Path.cwd()


def _elsewhere(path: str, db: Path | str) -> list[str]:
    """A base model written by a run of *another* registry (another run root): walk on there."""
    from tempering.runs.registry import is_url, read_marker

    for c in _locate(path, _root(db)):
        marker = read_marker(c)
        if marker is None:
            continue
        other = marker["registry"]
        same = other == db if is_url(other) or isinstance(db, str) else Path(other).resolve() == db.resolve()
        if not same:
            return [str(c)]
    return []


def _add_file(lineage: Lineage, recorded: str, sha: str | None, root: Path) -> None:
    candidates = [c for c in _locate(recorded, root) if c.is_file()]
    if not candidates:
        lineage.missing.append(recorded)
        return
    for c in candidates:
        if sha256_file(c) == sha:
            if c.resolve() not in {f.resolve() for f in lineage.files}:
                lineage.files.append(c)
            return
    lineage.changed.append(recorded)
    lineage.files.append(candidates[0])  # still scanned: what is there now may hold suite tasks


@dataclass
class LeakScan:
    """A lineage scan's findings: contaminated rows per suite, and the rows it could not read."""

    rows: dict[str, list[str]] = field(default_factory=dict)
    """Suite name -> training rows (`file#id`, or `file:line` for rows without an id) holding its tasks."""
    quarantined: list[RowError] = field(default_factory=list)
    """Unreadable training rows, skipped as training skips them (training never saw them either)."""


def contaminated_rows(files: Sequence[Path], suites: Sequence[Suite]) -> LeakScan:
    """Scan `files` for the tasks of `suites`; a bad row is quarantined and counted, never raised."""
    out = LeakScan({s.name: [] for s in suites})
    if not files or not suites:
        return out
    index = suite_index(suites)
    for path in files:
        scan = index.scan_file(path)
        out.quarantined += scan.errors
        for hit in scan.hits:
            ref = _row_ref(path, hit)
            for suite in dict.fromkeys(m.suite for m in hit.matches):
                out.rows[suite].append(ref)
    return out


def _row_ref(path: Path, hit: Hit) -> str:
    return hit.row_id if hit.row_id.startswith(str(path)) else f"{path}#{hit.row_id}"


# ---------------------------------------------------------------------------- private guard


def check_private_overlap(data_paths: Sequence[str | Path], suites: Sequence[Suite] | None = None) -> None:
    """Refuse training data that contains tasks of a private suite.

    Args:
        data_paths: training files (JSONL / JSON / Parquet).
        suites: the suites to protect; None means every registered private suite.
    Raises:
        PrivateSuiteOverlap: naming the suites, the number of rows and the first rows.
    """
    private = _private(suites)
    if not private or not data_paths:
        return
    index = suite_index(private)
    hits = [(Path(p), hit) for p in data_paths for hit in index.scan_file(p).hits]
    _raise_on_hits(hits, ", ".join(str(p) for p in data_paths))


def check_private_overlap_tasks(
    tasks: Sequence[Task], suites: Sequence[Suite] | None = None, source: str = "training tasks"
) -> None:
    """The same check for in-memory training tasks (e.g. GRPO prompts from a generator)."""
    private = _private(suites)
    if not private or not tasks:
        return
    hits = [(Path(source), hit) for hit in suite_index(private).scan(_task_rows(tasks), source=source)]
    _raise_on_hits(hits, source)


def _private(suites: Sequence[Suite] | None) -> list[Suite]:
    return [s for s in (registered_suites() if suites is None else suites) if s.private]


def _raise_on_hits(hits: list[tuple[Path, Hit]], where: str) -> None:
    if not hits:
        return
    names = sorted({m.suite for _, h in hits for m in h.matches})
    rows = [_row_ref(p, h) for p, h in hits]
    shown = ", ".join(rows[:SHOWN_ROWS]) + (f" (+{len(rows) - SHOWN_ROWS} more)" if len(rows) > SHOWN_ROWS else "")
    raise PrivateSuiteOverlap(
        f"training data overlaps private eval suite(s) {', '.join(names)}: {len(rows)} row(s) in {where}: {shown}. "
        f"Remove them first: temper data decontam --against {','.join(names)} DATA -o CLEAN.jsonl"
    )
