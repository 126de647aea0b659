"""Which registry a command opens, and `temper init`, which makes a project's.

Each registry command opens one registry: `--registry` (an SQLite file or a PostgreSQL URL) if given,
else `$TEMPERING_REGISTRY` if set, else the project's (`temper init`), else `<--root>/registry.sqlite`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from tempering.cli.common import err, fail
from tempering.runs import REGISTRY_ENV, REGISTRY_FILE

if TYPE_CHECKING:
    from tempering.runs.registry import Registry

out = Console(highlight=False, soft_wrap=True)  # a path or a rule stays on one line


ROOT = typer.Option(Path("runs"), "--root", help="Run root holding registry.sqlite.")


REGISTRY = typer.Option(
    None,
    "--registry",
    help=f"Registry: an SQLite file or a postgresql+psycopg:// URL "
    f"(default: ${REGISTRY_ENV}, else the project's (`temper init`), else <root>/{REGISTRY_FILE}).",
)


def open_registry(root: Path, registry: Optional[str], marker: Optional[str] = None) -> Registry:
    """The registry a command reads: `--registry`, else the one a model's `marker` names, else the
    default (`runs.default_registry`); one-line errors for a missing file or an unreachable server."""

    from tempering.runs import default_registry
    from tempering.runs.registry import Registry, RegistryError  # SQLAlchemy: imported only when used

    if registry is not None:
        where, why = registry, "--registry"
    elif marker is not None:
        where, why = marker, "the model's run marker"
    else:
        where, why = default_registry(root)
    if "://" not in str(where) and not Path(where).is_file():
        fail(f"no registry at {where} ({why}){_elsewhere(root)}")
    try:
        opened = Registry(where)
    except RegistryError as exc:
        fail(str(exc))
    err.print(f"[dim]registry: {redacted(where)} ({why})[/dim]")
    return opened


def redacted(location: str) -> str:
    """A registry location to print: a URL without its password."""
    if "://" not in location:
        return location
    from sqlalchemy.engine import make_url

    return make_url(location).render_as_string(hide_password=True)


def _elsewhere(root: Path) -> str:
    """A hint naming registries under `root` (a pipeline's own run root keeps one)."""
    found = sorted(str(p) for p in Path(root).glob(f"**/{REGISTRY_FILE}"))[:5] if Path(root).is_dir() else []
    hint = f"; registries under {root}: {', '.join(found)} (pass --registry FILE)" if found else ""
    from tempering.runs import project_registry

    return hint + (
        "; `temper init` makes one registry for every run of this project" if project_registry() is None else ""
    )


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def scalars(metrics: dict[str, Any], limit: int = 8) -> str:
    items = [(k, v) for k, v in metrics.items() if isinstance(v, (int, float))]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items[:limit])


def print_evals(evals: list[dict[str, Any]]) -> None:
    for e in evals:
        verdict = {True: "[green]gate passed[/green]", False: "[red]gate failed[/red]", None: "no gate"}[e["passed"]]
        out.print(
            f"eval {e['id']}: {escape(e['report'])}  sha256 {short(e['report_sha256'])}  {verdict}"
            + (f"  {escape(scalars(e['metrics']))}" if e["metrics"] else "")
        )
        for rule in (e["gate"] or {}).get("rules", []):
            if not rule.get("passed"):
                out.print(f"  [red]FAIL[/red] {escape(str(rule['rule']))}: {escape(str(rule.get('detail', '')))}")


def init(
    directory: Path = typer.Argument(Path("."), help="The project root (default: the working directory)."),
) -> None:
    """Make DIRECTORY a project: every run, pipeline stage, eval, release and command started in it
    or below shares one registry, DIRECTORY/.tempering/registry.sqlite ($TEMPERING_REGISTRY wins)."""
    from tempering.runs import PROJECT_DIR, project_registry

    enclosing = project_registry(directory)
    if enclosing is not None and enclosing.parent.parent != directory.resolve():
        fail(f"{directory} is inside the project {enclosing.parent.parent} already (its registry: {enclosing})")
    (directory / PROJECT_DIR).mkdir(parents=True, exist_ok=True)
    from tempering.runs.registry import Registry

    Registry(directory / PROJECT_DIR / REGISTRY_FILE).close()  # created now: commands find it before any run
    out.print(f"project {directory.resolve()}: registry {directory.resolve() / PROJECT_DIR / REGISTRY_FILE}")
    if os.environ.get(REGISTRY_ENV):
        err.print(f"[yellow]note: ${REGISTRY_ENV} is set and wins over the project registry[/yellow]")
