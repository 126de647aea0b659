"""`temper sandbox run|check`: run one program in the sandbox, or prove the sandbox isolates.

Mounted by the main CLI as `temper sandbox`.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tempering.errors import UserError
from tempering.sandbox.base import Limits, SandboxUnavailable
from tempering.sandbox.pool import SandboxPool

app = typer.Typer(help="Run untrusted code in isolation, or check that the sandbox isolates.", no_args_is_help=True)


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    cmd: Optional[List[str]] = typer.Argument(None, help="Command and arguments (after --)."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="A Python file to run instead of CMD."),
    limits: str = typer.Option("", "--limits", help="e.g. wall_s=5,memory_bytes=128M,output_bytes=64K"),
    backend: str = typer.Option("bwrap", "--backend", help="bwrap | nsjail | auto | unsafe-local"),
) -> None:
    """Run CMD (or --file F) in a fresh sandbox and print the ExecResult as JSON.

    Exit status: 0 when the program ran and exited 0; 1 when it failed, timed out or was
    killed (status not ok, or a non-zero exit code); 2 when the sandbox itself could not run it.
    """
    if (file is None) == (not cmd):
        raise typer.BadParameter("give either --file F or -- CMD...")
    code = None
    if file is not None:
        try:
            code = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            typer.echo(f"error: {file}: cannot read the program ({getattr(e, 'strerror', None) or e})", err=True)
            raise typer.Exit(2) from None
    try:
        parsed = Limits.parse(limits)
    except UserError as e:
        raise typer.BadParameter(str(e), param_hint="--limits") from e
    try:
        with SandboxPool(backend=backend, size=1, limits=parsed) as pool:
            if code is not None:
                result = pool.exec(code=code)
            else:
                result = pool.exec(list(cmd or []))  # checked above: a command when no file
    except SandboxUnavailable as e:
        typer.echo(f"sandbox unavailable: {e}", err=True)
        raise typer.Exit(2) from e
    typer.echo(result.to_json())
    raise typer.Exit(exit_code(result))


def exit_code(result) -> int:
    """The `sandbox run` exit status for an ExecResult (see `run`)."""
    if result.status == "sandbox_error":
        return 2
    return 0 if result.status == "ok" and result.exit_code == 0 else 1


@app.command()
def check(backend: str = typer.Option("bwrap", "--backend", help="bwrap | nsjail | auto")) -> None:
    """Run the isolation self-check; exit non-zero if any probe leaks."""
    try:
        with SandboxPool(backend=backend, size=1) as pool:
            report = pool.check()
    except SandboxUnavailable as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from e
    typer.echo(report.summary() if report is not None else "self-check skipped (unsafe-local backend)")
