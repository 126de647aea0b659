"""`temper lineage`: the chain behind a checkpoint, from its data to its releases."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from tempering.cli.common import fail
from tempering.cli.registry import REGISTRY, ROOT, open_registry, print_evals, scalars, short

if TYPE_CHECKING:
    from tempering.runs.registry import Registry

out = Console(highlight=False, soft_wrap=True)  # a path or a rule stays on one line


def _find_run(reg: Registry, target: str) -> dict[str, Any]:
    from tempering.runs.registry import model_dir, model_marker

    marker = model_marker(target)
    if marker is not None:
        try:
            return reg.get(marker["run_id"])
        except KeyError:
            fail(f"{target}: its marker names run {marker['run_id']} of {marker['registry']}, not in {reg.location}")
    found = reg.run_for_output(model_dir(target)) if model_dir(target).exists() else None
    if found is not None:
        return found
    try:
        return reg.get(target)
    except KeyError:
        fail(f"{target}: no run of {reg.location} wrote it (not a recorded output, run id or run name)")


def lineage(
    checkpoint: str = typer.Argument(
        ..., help="A checkpoint dir (its marker names the run), a recorded output path, or a run id or name."
    ),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """The chain behind a checkpoint: data files with their roles and the data passes (dedup,
    decontam, mix, ...) that wrote them, the stages, the checkpoint, its evals and releases."""
    from tempering.runs.registry import model_marker
    from tempering.runs.releases import Releases

    marker = model_marker(checkpoint)  # names the registry that wrote it, wherever the run root is
    with open_registry(root, registry, marker["registry"] if marker else None) as reg:
        run = _find_run(reg, checkpoint)
        rows = reg.lineage(run["id"])
        by_run: dict[str, list] = {}
        for row in rows:
            by_run.setdefault(row.run_id, []).append(row)
        for run_id, inputs in by_run.items():
            r = reg.get(run_id)
            indent = "  " * inputs[0].depth
            out.print(
                f"{indent}[bold]{escape(r['name'])}[/bold] ({r['kind']}, {run_id}) {r['status']}"
                + (f"  {escape(scalars(r['metrics']))}" if r["metrics"] else "")
            )
            for i in inputs:
                if i.role is None:
                    continue
                parent = reg.latest(i.parent_run) if i.parent_run else None  # None: a run of another registry
                source = f"  <- {parent['name'] if parent else 'run'} ({i.parent_run})" if i.parent_run else ""
                sha = i.sha256 or (_checkpoint_sha(reg, i.parent_run, i.path) if i.parent_run else None)
                out.print(f"{indent}  {i.role:<10} {escape(i.path)}  sha256 {short(sha)}{escape(source)}")
            for o in reg.outputs(run_id):
                if o["role"] != "run_dir":
                    out.print(f"{indent}  -> {o['role']:<7} {escape(o['path'])}  sha256 {short(o['sha256'])}")
        print_evals(reg.evals(run_id=run["id"]))
        _print_attempts(reg, rows)
        releases = Releases(reg).for_run(run["id"])
        for rel in releases:
            out.print(f"release v{rel.version} {rel.status}  {escape(rel.model)}  sha256 {short(rel.model_sha256)}")
        if not releases:
            out.print("not released")


def _print_attempts(reg: Registry, rows: list[Any]) -> None:
    """The rebalancing attempts (`tracks:` pipelines) whose final candidate is this checkpoint or one it came from."""
    outputs = {str(Path(o["path"]).resolve()) for row in rows for o in reg.outputs(row.run_id)}
    for r in reg.list(limit=1_000_000):
        if r["kind"] != "rebalance" or (r["metrics"] or {}).get("final") not in outputs:
            continue
        attempts = r["metrics"].get("attempts", [])
        out.print(f"[bold]rebalancing[/bold] ({r['id']}): {len(attempts)} attempt(s), {r['metrics'].get('status')}")
        for a in attempts:
            tracks = ", ".join(f"{t} w={s['weight']:g} replay={s['replay']:g}" for t, s in a.get("tracks", {}).items())
            out.print(f"  attempt {a['attempt']}: {a['status']}  {escape(tracks)}  {escape(str(a.get('candidate')))}")
            for rule in a.get("failed_rules", []):
                out.print(f"    [red]FAIL[/red] {escape(rule)}")
            for action in a.get("actions", []):
                out.print(f"    -> {escape(action)}")


def _checkpoint_sha(reg: Registry, run_id: str, path: str) -> str | None:
    """The hash a model input's parent run recorded for it (model dirs are not hashed again as inputs)."""
    resolved = str(Path(path).expanduser().resolve())
    hashes = {o["path"]: o["sha256"] for o in reg.outputs(run_id) if o["role"] in ("final", "merged")}
    return hashes.get(resolved)
