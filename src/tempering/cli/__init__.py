"""`temper`: each command parses its config/flags and calls one function.

One module per command group, by what a user thinks of: `train` (every training command),
`data`, `eval`, `runs` (recorded runs and their rollouts), `lineage`, `release`, `model`
(`export`, `model ...`), `registry` (which registry a command opens; `init`), `serve` (the
OpenAI server, keys, feedback, arena), `tinker` (the Tinker API server), `chat`, `pipeline`
(`temper run`, `temper demo`); `common` holds what they share.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import typer

from tempering.cli import train
from tempering.cli.agent import agent_app
from tempering.cli.chat import chat
from tempering.cli.common import RetiredCommands
from tempering.cli.data import data_app
from tempering.cli.eval import eval_app, verify
from tempering.cli.lineage import lineage
from tempering.cli.longctx import data_longctx, model_rope
from tempering.cli.model import export, model_app
from tempering.cli.pipeline import demo, run_pipeline_cmd
from tempering.cli.registry import init
from tempering.cli.release import release_app
from tempering.cli.runs import runs_app, traj
from tempering.cli.serve import arena_app, feedback_app, keys_app, serve
from tempering.cli.tinker import tinker_app
from tempering.cli.vision import vision_app
from tempering.sandbox.cli import app as sandbox_app

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VERBOSE = ("--verbose", "-v")
DEBUG = "--debug"
DEBUG_KEY = "tempering.debug"  # in click's ctx.meta, which every sub-context shares


class VerboseAnywhere(RetiredCommands):
    """`temper`'s command group: `--verbose` / `-v` and `--debug` count wherever they stand
    (`temper sft c.yaml -v` as `temper -v sft c.yaml`), up to a `--` that ends the options.
    A retired command name (`vision_sft`) is one line naming the new one."""

    retired: dict[str, str] = {}

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[:end] if a in VERBOSE]
        debug = [DEBUG] if DEBUG in args[:end] else []
        rest = [a for a in args[:end] if a not in VERBOSE and a != DEBUG] + args[end:]
        return super().parse_args(ctx, flags[:1] + debug + rest)

    def invoke(self, ctx: typer.Context) -> Any:
        """Run the command through `run_command` (bad input: one line; a bug: one line and a
        crash log). Ctrl-C prints how to go on and exits 130 at once. A plain exit would
        first wait for worker threads (a rollout sampling ahead, scoring pools) to finish their
        work, tens of seconds; whatever must be written is written by then (checkpoints and
        registry rows are atomic, and `run_stage` marks the run interrupted as the exception passes)."""
        from tempering.cli.common import run_command

        try:
            return run_command(functools.partial(super().invoke, ctx), lambda: bool(ctx.meta.get(DEBUG_KEY)))
        except KeyboardInterrupt:
            from tempering.cli.common import err

            err.print(
                "[yellow]interrupted; rerun the same command to resume (runs resume from their last checkpoint)[/yellow]"
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)


app = typer.Typer(
    cls=VerboseAnywhere, help="Tempering: post-training for open-weight language models.", no_args_is_help=True
)


def quiet_libraries(verbose: bool) -> None:
    """Keep stderr for Tempering's own lines: no FutureWarnings, weight-loading bars or
    transformers/peft advice unless --verbose. Env vars first, so libraries imported later
    read them; the logging calls cover libraries already imported."""
    if verbose:
        return
    import logging
    import sys
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("transformers", "peft", "accelerate", "huggingface_hub", "torch._dynamo"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"tempering {version('tempering')}")
        except PackageNotFoundError:
            print("tempering (not installed as a package)")
        raise typer.Exit(0)


@app.callback()
def main(
    ctx: typer.Context,
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show library warnings, weight-loading bars and transformers/peft messages."
    ),
    version_: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False,
        DEBUG,
        help="On an internal error (a bug, not bad input) also print its traceback on stderr "
        "(as TEMPERING_DEBUG=1 does); it is kept in a crash.log either way.",
    ),
) -> None:
    """Tempering: post-training for open-weight language models."""
    ctx.meta[DEBUG_KEY] = debug
    quiet_libraries(verbose)


VerboseAnywhere.retired.update(train.retired_names())
for _name, _command in train.commands().items():
    if _name == "agent":  # a group: `temper agent CONFIG` trains, `temper agent export-recovered RUN` exports
        app.add_typer(agent_app(_command, _command.__doc__ or ""), name=_name)
    else:
        app.command(_name)(_command)
for _name, _command in (
    ("traj", traj),
    ("verify", verify),
    ("export", export),
    ("demo", demo),
    ("chat", chat),
    ("run", run_pipeline_cmd),
    ("lineage", lineage),
    ("init", init),
    ("serve", serve),
):
    app.command(_name)(_command)
model_app.command("rope")(model_rope)
data_app.command("longctx")(data_longctx)
for _name, _group in (
    ("data", data_app),
    ("model", model_app),
    ("sandbox", sandbox_app),
    ("eval", eval_app),
    ("runs", runs_app),
    ("release", release_app),
    ("keys", keys_app),
    ("feedback", feedback_app),
    ("arena", arena_app),
    ("tinker", tinker_app),
    ("vision", vision_app),
):
    app.add_typer(_group, name=_name)
