"""`temper tinker serve`: the Tinker training and sampling API (`serve/tinker.py`), a server of its
own beside `temper serve`'s OpenAI API; its keys are `temper keys`' (docs/integrations.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from tempering.cli.common import fail, refuse_flag_keys

out = Console(highlight=False, soft_wrap=True)


tinker_app = typer.Typer(
    help="The Tinker API: the `tinker` SDK and tinker-cookbook recipes train and sample here.", no_args_is_help=True
)


@tinker_app.command("serve")
def tinker_serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="TCP port."),
    state: Path = typer.Option(
        Path("serve"), "--state", help="The deployment's state directory (serve.sqlite, saved weights)."
    ),
    registry: Optional[str] = typer.Option(
        None,
        help="Registry each training client's run is recorded in (SQLite file or PostgreSQL URL); "
        "default: $TEMPERING_REGISTRY, else STATE/registry.sqlite.",
    ),
    model: Optional[str] = typer.Option(
        None, help="The base model clients train and sample (default smollm2-135m-instruct)."
    ),
    rate_limit: Optional[int] = typer.Option(
        None, min=1, help="Requests per minute per key (default for keys without one; 6000)."
    ),
    max_tokens: Optional[int] = typer.Option(None, min=1, help="Largest max_tokens of a sample request (1024)."),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="TinkerServeConfig override key=value (repeatable), e.g. max_samplers=4."
    ),
) -> None:
    """Serve the Tinker training and sampling API (TINKER_BASE_URL=http://HOST:PORT,
    TINKER_API_KEY=<the key `temper keys create` prints>; docs/integrations.md)."""
    from tempering.config import ConfigError, load_config
    from tempering.runs import REGISTRY_ENV
    from tempering.serve.config import TinkerServeConfig

    values = dict(
        host=host,
        port=port,
        state=state,
        registry=registry or os.environ.get(REGISTRY_ENV),
        model=model,
        rate_limit=rate_limit,
        max_tokens=max_tokens,
        precision=precision,
    )
    refuse_flag_keys(overrides or [], values)
    try:
        cfg = load_config(
            TinkerServeConfig, None, list(overrides or []), literal={k: v for k, v in values.items() if v is not None}
        )
    except ConfigError as exc:
        fail(exc)
    try:
        from tempering.serve.tinker import create_tinker_app, lost_message, serve_tinker
    except ImportError as exc:
        fail(f"temper tinker serve needs the tinker SDK's wire types: pip install 'tempering[tinker]' ({exc})")
    app = create_tinker_app(cfg)
    if app.state.jobs.owners.lost:
        out.print(lost_message(app.state.jobs))
    out.print(f"Tinker API on http://{cfg.host}:{cfg.port} (TINKER_BASE_URL), state {cfg.state}")
    serve_tinker(app)
