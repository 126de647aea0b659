"""`temper serve`, `temper keys`, `temper feedback`, `temper arena`: the OpenAI-compatible server and what hangs off it
(the Tinker API server is `temper tinker serve`, cli/tinker.py)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from tempering.cli.common import RetiredCommands, err, fail, refuse_flag_keys, retired_option

out = Console(highlight=False, soft_wrap=True)


class _KeysGroup(RetiredCommands):
    retired = {"list": "ls"}


keys_app = typer.Typer(cls=_KeysGroup, help="API keys of a deployment: create, ls, revoke.", no_args_is_help=True)


feedback_app = typer.Typer(help="Feedback collected by `temper serve`.", no_args_is_help=True)


arena_app = typer.Typer(help="Votes of the blind arena.", no_args_is_help=True)


STATE = typer.Option(Path("serve"), "--state", help="The deployment's state directory (serve.sqlite).")


def _store(state: Path, must_exist: bool = True):
    from tempering.serve.store import Store

    if must_exist and not (state / "serve.sqlite").is_file():
        fail(f"no deployment at {state} (no serve.sqlite; `temper keys create` starts one)")
    return Store(state / "serve.sqlite")


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="TCP port."),
    state: Path = STATE,
    registry: Optional[str] = typer.Option(
        None,
        help="Release registry (SQLite file or PostgreSQL URL); "
        "default: $TEMPERING_REGISTRY, else the project's (`temper init`), else none (serve --model).",
    ),
    model: Optional[str] = typer.Option(
        None, help="Model served when no release is production (default smollm2-135m-instruct)."
    ),
    canary_share: float = typer.Option(0.0, min=0.0, max=1.0, help="Share of production traffic for the candidate."),
    log_text: bool = typer.Option(
        False, "--log-text", help="Keep request and response text (feedback export needs it)."
    ),
    capture_tokens: bool = typer.Option(
        False,
        "--capture-tokens",
        help="Keep prompt and sampled token ids with log-probs (needs --log-text); "
        "`temper feedback export --trajectories` writes them as agent episodes.",
    ),
    rate_limit: Optional[int] = typer.Option(
        None, min=1, help="Requests per minute per key (default for keys without one; 600)."
    ),
    max_tokens: Optional[int] = typer.Option(None, min=1, help="Default and largest max_tokens (256)."),
    arena_prompts: Optional[Path] = typer.Option(
        None, help="Prompts for the arena (JSONL with 'prompt', or text lines)."
    ),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32."),
    quantize: str = typer.Option("none", help="none | int8: serve weight-only int8 copies (CPU)."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="ServeConfig override key=value (repeatable), e.g. engine.max_slots=64."
    ),
    _tinker: bool = retired_option("--tinker", "its own command, `temper tinker serve`"),
) -> None:
    """Serve releases over an OpenAI-compatible API (plus feedback, audit and the arena at /arena;
    docs/serve.md). The Tinker API is `temper tinker serve`."""
    import os

    import uvicorn

    from tempering.runs import REGISTRY_ENV, default_registry, project_registry
    from tempering.serve.config import ServeConfig

    if registry is None and (os.environ.get(REGISTRY_ENV) or project_registry() is not None):
        registry = default_registry()[0]  # $TEMPERING_REGISTRY, else the project's (`temper init`)
    if registry and "://" not in registry and not Path(registry).is_file():
        fail(f"no registry at {registry}")
    if registry:
        from tempering.cli.registry import redacted

        err.print(f"[dim]registry: {redacted(registry)}[/dim]")
    if arena_prompts is not None and not arena_prompts.is_file():
        fail(f"no arena prompts file at {arena_prompts}")
    if quantize not in ("none", "int8"):
        fail(f"--quantize {quantize!r} is not one of none, int8")
    values = dict(
        host=host,
        port=port,
        state=state,
        registry=registry,
        canary_share=canary_share,
        log_text=log_text,
        capture_tokens=capture_tokens,
        arena_prompts=arena_prompts,
        precision=precision,
        quantize=quantize,
        **{k: v for k, v in dict(rate_limit=rate_limit, max_tokens=max_tokens).items() if v is not None},
    )
    from tempering.config import ConfigError, load_config

    refuse_flag_keys(overrides or [], {**values, "model": model, "rate_limit": rate_limit, "max_tokens": max_tokens})
    try:
        cfg = load_config(
            ServeConfig, None, list(overrides or []), literal={**values, **({"model": model} if model else {})}
        )
    except ConfigError as exc:
        fail(exc)
    from tempering.serve.app import create_app

    listener = _listen(cfg.host, cfg.port)  # before anything is loaded or written: a port in use fails here
    new_state = not Path(cfg.state).exists()
    try:
        app = create_app(cfg)
        err.print("[dim]loading the model and warming it up (one short generation) ...[/dim]")
        warmed = app.state.models.warm_up()
        if report := app.state.models.report():
            err.print(f"[dim]{report}[/dim]")
    except BaseException:  # a model that cannot load (a UserError), or a bug: `run_command` tells which
        listener.close()
        if new_state:  # leave no half-made deployment behind
            shutil.rmtree(cfg.state, ignore_errors=True)
        raise
    if not any(k.revoked_at is None for k in app.state.store.keys()):
        err.print(
            f"[yellow]no API keys yet: every request needs one; create one with "
            f"`temper keys create NAME --state {cfg.state}` (the secret is its last line)[/yellow]"
        )
    out.print(f"serving {warmed} on http://{cfg.host}:{cfg.port}/v1 (arena: /arena), state {cfg.state}")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (uvicorn serves on it), or the one-line error exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server there? choose another --port)")
    return sock


@keys_app.command("create")
def keys_create(
    name: str = typer.Argument(..., help="A name for the key (unique)."),
    state: Path = STATE,
    rate_limit: Optional[int] = typer.Option(None, min=1, help="Requests per minute for this key."),
) -> None:
    """Create a key; the secret is printed once, as the last line, and only its hash is stored."""
    from tempering.serve.store import StoreError

    try:
        key, secret = _store(state, must_exist=False).create_key(name, rate_limit)
    except StoreError as exc:
        fail(exc)
    out.print(f"created {key.id} ({key.name}); keep the key now, it is not shown again:")
    print(secret)


@keys_app.command("ls")
def keys_ls(state: Path = STATE) -> None:
    """Keys with their status (secrets are never shown: only hashes are stored)."""
    import time

    for k in _store(state).keys():
        status = (
            "revoked " + time.strftime("%Y-%m-%d %H:%M", time.localtime(k.revoked_at)) if k.revoked_at else "active"
        )
        out.print(f"{k.id}  {k.name}  {status}  rate_limit={k.rate_limit or 'default'}")


@keys_app.command("revoke")
def keys_revoke(name: str = typer.Argument(..., help="Key name or id."), state: Path = STATE) -> None:
    """Revoke a key: refused from the next request on (a running server reads keys per request)."""
    from tempering.serve.store import StoreError

    try:
        key = _store(state).revoke_key(name)
    except StoreError as exc:
        fail(exc)
    out.print(f"revoked {key.id} ({key.name})")


@feedback_app.command("export")
def feedback_export(
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="JSONL of feedback rows to write."),
    trajectories: Optional[Path] = typer.Option(
        None,
        "--trajectories",
        help="JSONL of served chat episodes, token-exact (a deployment with --capture-tokens), for agent training.",
    ),
    state: Path = STATE,
) -> None:
    """Feedback with its request and answer as JSONL for the pipeline's `feedback` stage (`served`);
    `--trajectories`: every captured conversation as a trainable episode (docs/serve.md)."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.serve.exports import feedback_rows, trajectory_rows

    if out_path is None and trajectories is None:
        fail("nothing to export: pass --out FEEDBACK.jsonl, --trajectories EPISODES.jsonl, or both")
    store = _store(state)
    if out_path is not None:
        rows, skipped = feedback_rows(store)
        write_jsonl_atomic(out_path, rows, sidecar=True)
        note = f" ({skipped} without stored text skipped: serve with --log-text)" if skipped else ""
        out.print(f"wrote {len(rows)} feedback row(s) to {out_path}{note}")
    if trajectories is not None:
        episodes = trajectory_rows(store)
        write_jsonl_atomic(trajectories, episodes, sidecar=True)
        note = "" if episodes else " (none captured: serve with --log-text --capture-tokens)"
        out.print(f"wrote {len(episodes)} episode(s) to {trajectories}{note}")


@arena_app.command("export")
def arena_export(
    out_path: Path = typer.Option(..., "--out", "-o", help="JSONL of preference pairs to write."), state: Path = STATE
) -> None:
    """Arena votes as preference pairs with `votes` (for `temper data agree` and DPO; the feedback stage's `votes`)."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.serve.arena import arena_pairs

    pairs, skipped = arena_pairs(_store(state).votes())
    write_jsonl_atomic(out_path, pairs, sidecar=True)
    note = f" ({skipped} battle(s) without an A/B majority skipped)" if skipped else ""
    out.print(f"wrote {len(pairs)} pair(s) to {out_path}{note}")
