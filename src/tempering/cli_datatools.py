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


def _show_errors(errors: list) -> None:
    for e in errors[:5]:
        err.print(f"[yellow]{e}[/yellow]")


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

    from tempering.recipes.datatools import dedup_file

    try:
        settings = DedupSettings(threshold=threshold, num_perm=num_perm, shingle=shingle, seed=seed, near=near)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    try:
        with _progress("dedup") as tick:
            result = dedup_file(data, out_path, settings, report_path, progress=tick)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    _show_errors(result.errors)
    counts, report_path, quarantine = result.counts, result.report, result.quarantine
    run_id = _record_run(Path(runs) if runs.strip() else None, "dedup", settings.model_dump(), data,
                         {"data": out_path, "report": report_path}, counts)
    _table(f"dedup {data}", counts)
    for cluster in result.extra["clusters"]:
        err.print(f"cluster of {cluster['size']}: keeps {cluster['keeper']}: {cluster['example']!r}", markup=False)
    print(json.dumps({**counts, "written": str(out_path), "sha256": result.sha256, "report": str(report_path),
                      "quarantine": str(quarantine) if quarantine else None, "run_id": run_id}))


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

    from tempering.evals.suite import SuiteError
    from tempering.recipes.datatools import decontam_file

    try:
        settings = DecontamSettings(n=n, min_coverage=min_coverage, boilerplate_tasks=boilerplate_tasks)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    try:
        with _progress("decontam") as tick:
            result = decontam_file(data, against, out_path, settings, report_path, progress=tick)
    except (SuiteError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    for suite, task in result.extra["unindexed"][:5]:
        err.print(f"[yellow]warning: {suite} task {task} is all boilerplate and can never match[/yellow]")
    _show_errors(result.errors)
    counts, report_path, quarantine, summary = result.counts, result.report, result.quarantine, result.extra["summary"]
    run_id = None
    if out_path is not None:
        outputs = {"data": out_path, **({"report": report_path} if report_path else {})}
        run_id = _record_run(Path(runs) if runs.strip() else None, "decontam", settings.model_dump(), data,
                             outputs, counts)
    _table(f"decontam {data}", {**counts, **{f"suite {k}": v for k, v in summary["by_suite"].items()}})
    print(json.dumps({**summary, **counts, "rows": summary["rows"][:SHOWN_ROWS], "scanned": counts["rows"],
                      "written": str(out_path) if out_path else None, "sha256": result.sha256,
                      "quarantine": str(quarantine) if quarantine else None, "run_id": run_id}))
    raise typer.Exit(1 if result.extra["hits"] and out_path is None else 0)
