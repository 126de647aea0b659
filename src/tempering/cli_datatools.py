"""`temper data dedup` and `temper data decontam`: parse flags, stream the data, record provenance.

Both stream their input (JSONL by line, Parquet by batch), quarantine unreadable rows
(`<out>.quarantine.jsonl`, counted), write the kept rows atomically with `<out>.sha256`,
write a JSON report next to the output, record the pass as a run in the registry under
`--runs` (input with its sha256, output, counts), and end with one JSON line of counts.
Registered in `cli.py` as `data_app.command("dedup")(data_dedup)` and `("decontam")`.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from tempering.cli_common import err, fail
from tempering.config import DecontamSettings, DedupSettings

SHOWN_ROWS = 1000  # rows listed in the final JSON line; the report file holds them all
_DEDUP = DedupSettings()
_DECONTAM = DecontamSettings()


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int], None]]:
    """A rows-so-far progress line on stderr (row counts: the total is unknown while streaming)."""
    with Progress(SpinnerColumn(), TextColumn(f"{label} {{task.completed:,}} rows"), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda rows: bar.update(task, completed=rows)


def _record_run(runs: Path | None, kind: str, config: dict[str, Any], data: Path, outputs: dict[str, Path],
                metrics: dict[str, Any]) -> str | None:
    """Record this data pass in `runs/registry.sqlite` (input with role `train`, outputs); its run id."""
    if runs is None:
        return None
    from tempering.pipeline.registry import Registry, describe_input

    with Registry.open(runs) as registry:
        name = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = registry.start(name, kind, config, [describe_input(data, "train")], None)
        for role, path in outputs.items():
            registry.record_output(run_id, role, path)
        registry.finish(run_id, {role: str(p.resolve()) for role, p in outputs.items()}, metrics)
    return run_id


def _table(title: str, counts: dict[str, Any]) -> None:
    table = Table(title=title, show_header=False)
    for key, value in counts.items():
        table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    err.print(table)


def _write_errors(errors: list, out: Path | None, data: Path) -> Path | None:
    from tempering.data.io import write_quarantine

    if not errors:
        return None
    for e in errors[:5]:
        err.print(f"[yellow]{e}[/yellow]")
    target = Path(f"{out if out is not None else data}.quarantine.jsonl")
    return write_quarantine(errors, target)


def data_dedup(
    data: Path = typer.Argument(..., help="Training data (JSONL / JSON / Parquet)."),
    out_path: Path = typer.Option(..., "-o", "--out", help="Write the kept rows here (JSONL)."),
    threshold: float = typer.Option(_DEDUP.threshold, help="Near-duplicate Jaccard threshold on word shingles."),
    num_perm: int = typer.Option(_DEDUP.num_perm, help="MinHash permutations."),
    shingle: int = typer.Option(_DEDUP.shingle, help="Words per shingle."),
    seed: int = typer.Option(_DEDUP.seed, help="MinHash seed (same seed, same output)."),
    near: bool = typer.Option(_DEDUP.near, help="Also remove near duplicates (--no-near: exact only)."),
    report_path: Optional[Path] = typer.Option(None, "--report", help="Cluster report (JSON); default "
                                               "<out>.dedup.json."),
    runs: str = typer.Option("runs", help="Run root whose registry records this pass ('' to skip)."),
) -> None:
    """Remove exact and near-duplicate rows (keep-first); report clusters; one JSON line of counts."""
    from pydantic import ValidationError

    from tempering.data.dedup import Deduper, dedup_rows
    from tempering.data.io import RowError
    from tempering.data.streams import AtomicJsonl, stream_rows, where
    from tempering.data.textnorm import row_texts

    try:
        settings = DedupSettings(threshold=threshold, num_perm=num_perm, shingle=shingle, seed=seed, near=near)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    errors: list[RowError] = []

    def readable() -> Iterator[tuple[str, Any]]:
        for location, row, error in stream_rows(data):
            try:
                if error is not None:
                    raise ValueError(str(error))
                row_texts(row)
            except ValueError as exc:
                errors.append(RowError(str(data), location, str(exc), row))
                continue
            yield (str(row["id"]) if isinstance(row, dict) and row.get("id") is not None else where(data, location)), row

    try:
        with AtomicJsonl(out_path) as writer, _progress("dedup") as tick:
            report = dedup_rows(readable(), Deduper(**settings.model_dump()), writer.write, progress=tick)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    quarantine = _write_errors(errors, out_path, data)
    counts = {**report.summary(), "rows": report.rows + len(errors), "quarantined": len(errors)}
    report_path = report_path or out_path.with_suffix(".dedup.json")
    report_path.write_text(json.dumps({**counts, "settings": settings.model_dump(), "lsh_bands": list(
        Deduper(**settings.model_dump()).bands), "input": str(data), "written": str(out_path), "sha256": writer.sha256,
        "clusters": report.cluster_list()}, indent=1, ensure_ascii=False))
    run_id = _record_run(Path(runs) if runs.strip() else None, "dedup", settings.model_dump(), data,
                         {"data": out_path, "report": report_path}, counts)
    _table(f"dedup {data}", counts)
    for cluster in report.cluster_list(limit=3):
        err.print(f"cluster of {cluster['size']}: keeps {cluster['keeper']}: {cluster['example']!r}", markup=False)
    print(json.dumps({**counts, "written": str(out_path), "sha256": writer.sha256, "report": str(report_path),
                      "quarantine": str(quarantine) if quarantine else None, "run_id": run_id}))


def _suite_index(against: List[str], settings: DecontamSettings) -> Any:
    from tempering.evals.contamination import NgramIndex
    from tempering.evals.suite import load_suite

    index = NgramIndex(**settings.model_dump())
    for name in (n.strip() for item in against for n in item.split(",")):
        if name:
            suite = load_suite(name)
            rows = [t.model_dump(include={"id", "prompt", "messages"}, exclude_none=True) for t in suite.task_list]
            index.add_tasks(suite.name, rows, private=suite.private)
    return index


def data_decontam(
    data: Path = typer.Argument(..., help="Training data (JSONL / JSON / Parquet)."),
    against: List[str] = typer.Option(..., "--against", help="Suites to check against: names or YAML paths, "
                                      "comma-separated or repeated."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the rows that match no suite here "
                                            "(JSONL); without it, only report (exit 1 when rows match)."),
    n: int = typer.Option(_DECONTAM.n, help="Gram length in words."),
    min_coverage: float = typer.Option(_DECONTAM.min_coverage, help="Share of a task's grams a row must hold."),
    boilerplate_tasks: int = typer.Option(_DECONTAM.boilerplate_tasks, help="Grams shared by this many tasks "
                                          "or more are boilerplate, not indexed."),
    report_path: Optional[Path] = typer.Option(None, "--report", help="Every hit (JSON; private suites by id "
                                               "only); default <out>.decontam.json when -o is given."),
    runs: str = typer.Option("runs", help="Run root whose registry records a removal pass ('' to skip)."),
) -> None:
    """Find (and with -o remove) training rows that contain eval suite tasks; prints one JSON summary."""
    from pydantic import ValidationError

    from tempering.cli_eval import decontam_summary
    from tempering.evals.contamination import decontaminate
    from tempering.evals.suite import SuiteError

    try:
        settings = DecontamSettings(n=n, min_coverage=min_coverage, boilerplate_tasks=boilerplate_tasks)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    try:
        index = _suite_index(against, settings)
        with _progress("decontam") as tick:
            report = decontaminate(index, data, out_path, progress=tick)
    except (SuiteError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    for suite, task in index.unindexed[:5]:
        err.print(f"[yellow]warning: {suite} task {task} is all boilerplate and can never match[/yellow]")
    quarantine = _write_errors(report.errors, out_path, data)
    summary = decontam_summary(report.hits)
    counts = {"rows": report.rows, "matched_rows": report.removed, "kept": report.kept if out_path else None,
              "quarantined": report.quarantined, "boilerplate_grams": index.boilerplate_grams}
    if report_path is None and out_path is not None:
        report_path = out_path.with_suffix(".decontam.json")
    if report_path is not None:
        report_path.write_text(json.dumps({**counts, "settings": settings.model_dump(), **summary,
                                           "hits": [h.to_dict() for h in report.hits]}, indent=1, ensure_ascii=False))
    run_id = None
    if out_path is not None:
        outputs = {"data": out_path, **({"report": report_path} if report_path else {})}
        run_id = _record_run(Path(runs) if runs.strip() else None, "decontam", settings.model_dump(), data,
                             outputs, counts)
    _table(f"decontam {data}", {**counts, **{f"suite {k}": v for k, v in summary["by_suite"].items()}})
    print(json.dumps({**summary, **counts, "rows": summary["rows"][:SHOWN_ROWS], "scanned": report.rows,
                      "written": str(out_path) if out_path else None, "sha256": report.sha256,
                      "quarantine": str(quarantine) if quarantine else None, "run_id": run_id}))
    raise typer.Exit(1 if report.hits and out_path is None else 0)
