"""Dedup and decontam passes over one data file: library code shared by `temper data dedup |
decontam` and the pipeline's `data.dedup` / `data.decontam` stages (no exits, no printing).

Both stream their input (JSONL by line, Parquet by batch), quarantine unreadable rows
(`<out>.quarantine.jsonl`, counted), write the kept rows atomically with `<out>.sha256`, and
write a JSON report next to the output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tempering.atomic import write_text_atomic
from tempering.config import DecontamSettings, DedupSettings


@dataclass
class PassResult:
    """What a dedup or decontam pass did: counts, where it wrote, and what the CLI shows."""

    counts: dict[str, Any]
    report: Path | None
    sha256: str | None
    quarantine: Path | None
    errors: list = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def write_errors(errors: list, out: Path | None, data: Path) -> Path | None:
    """Quarantine unreadable rows next to the output (or the input); None when there were none."""
    from tempering.data.io import write_quarantine

    if not errors:
        return None
    return write_quarantine(errors, Path(f"{out if out is not None else data}.quarantine.jsonl"))


def dedup_file(
    data: Path,
    out_path: Path,
    settings: DedupSettings,
    report_path: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> PassResult:
    """Remove exact and near-duplicate rows of `data` (keep-first) into `out_path`; report the clusters."""
    from tempering.atomic import AtomicJsonl
    from tempering.data.dedup import Deduper, dedup_rows
    from tempering.data.io import RowError
    from tempering.data.streams import require_jsonl, stream_rows, where
    from tempering.data.textnorm import row_texts

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
            yield (
                (str(row["id"]) if isinstance(row, dict) and row.get("id") is not None else where(data, location)),
                row,
            )

    deduper = Deduper(**settings.model_dump())
    with AtomicJsonl(require_jsonl(out_path), sidecar=True) as writer:
        report = dedup_rows(readable(), deduper, writer.write, progress=progress)
    quarantine = write_errors(errors, out_path, data)
    counts = {**report.summary(), "rows": report.rows + len(errors), "quarantined": len(errors)}
    report_path = report_path or out_path.with_suffix(".dedup.json")
    write_text_atomic(
        report_path,
        json.dumps(
            {
                **counts,
                "settings": settings.model_dump(),
                "lsh_bands": list(deduper.bands),
                "input": str(data),
                "written": str(out_path),
                "sha256": writer.sha256,
                "clusters": report.cluster_list(),
            },
            indent=1,
            ensure_ascii=False,
        ),
    )
    return PassResult(
        counts, report_path, writer.sha256, quarantine, errors, {"clusters": report.cluster_list(limit=3)}
    )


def suite_index(against: Sequence[str], settings: DecontamSettings) -> Any:
    """An n-gram index over the tasks of the named suites (names or YAML paths, comma-separated allowed)."""
    from tempering.evals.contamination import NgramIndex
    from tempering.evals.suite import load_suite

    index = NgramIndex(**settings.model_dump())
    for name in (n.strip() for item in against for n in item.split(",")):
        if name:
            suite = load_suite(name)
            rows = [t.model_dump(include={"id", "prompt", "messages"}, exclude_none=True) for t in suite.task_list]
            index.add_tasks(suite.name, rows, private=suite.private)
    return index


def decontam_summary(hits) -> dict:
    """Rows matched per suite; task ids only for public suites (private ones: counts)."""
    by_suite: dict[str, int] = {}
    rows = []
    for hit in hits:
        suites = list(dict.fromkeys(m.suite for m in hit.matches))
        for s in suites:
            by_suite[s] = by_suite.get(s, 0) + 1
        tasks = sorted({m.task_id for m in hit.matches if not m.private})
        rows.append({"row": hit.row_id, "suites": suites, "public_tasks": tasks})
    return {"matched_rows": len(hits), "by_suite": by_suite, "rows": rows}


def decontam_file(
    data: Path,
    against: Sequence[str],
    out_path: Path | None,
    settings: DecontamSettings,
    report_path: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> PassResult:
    """Find rows of `data` that contain eval suite tasks; with `out_path`, write the others there."""
    from tempering.evals.contamination import decontaminate

    index = suite_index(against, settings)
    report = decontaminate(index, data, out_path, progress=progress)
    quarantine = write_errors(report.errors, out_path, data)
    summary = decontam_summary(report.hits)
    counts = {
        "rows": report.rows,
        "matched_rows": report.removed,
        "kept": report.kept if out_path else None,
        "quarantined": report.quarantined,
        "boilerplate_grams": index.boilerplate_grams,
    }
    if report_path is None and out_path is not None:
        report_path = out_path.with_suffix(".decontam.json")
    if report_path is not None:
        write_text_atomic(
            report_path,
            json.dumps(
                {**counts, "settings": settings.model_dump(), **summary, "hits": [h.to_dict() for h in report.hits]},
                indent=1,
                ensure_ascii=False,
            ),
        )
    return PassResult(
        counts,
        report_path,
        report.sha256,
        quarantine,
        report.errors,
        {"summary": summary, "unindexed": index.unindexed, "hits": len(report.hits)},
    )
