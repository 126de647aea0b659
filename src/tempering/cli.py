"""`temper`: each command parses its config/flags and calls one function."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from tempering.cli_common import FORCE, FULL, NAME, OUT, STEPS, err, fail, train_from_config
from tempering.config import DEFAULT_MODEL, ConfigError, SFTConfig, load_config
from tempering.sandbox.cli import app as sandbox_app
from tempering.tables import print_wide

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
app = typer.Typer(help="Tempering: post-training for open-weight language models.", no_args_is_help=True)
data_app = typer.Typer(help="Data: validate, clean, mix and build training sets (validate, dedup, decontam, mix, "
                       "stratify, synth, failures, pairs, agree, audit).",
                       no_args_is_help=True)
model_app = typer.Typer(help="Models: resolve / convert a model spec.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(model_app, name="model")
app.add_typer(sandbox_app, name="sandbox")
out = Console()


def quiet_libraries(verbose: bool) -> None:
    """Keep stderr for Tempering's own lines: no FutureWarnings, weight-loading bars or
    transformers/peft advice unless --verbose. Env vars first, so libraries imported later
    read them; the logging calls cover libraries already imported."""
    if verbose:
        return
    import logging
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category)
    for name in ("transformers", "peft", "accelerate", "huggingface_hub", "torch._dynamo"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import sys

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
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Show library warnings, weight-loading bars and transformers/peft messages."),
    version_: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                  help="Print the version and exit."),
) -> None:
    """Tempering: post-training for open-weight language models."""
    quiet_libraries(verbose)


@app.command()
def sft(
    config: Path = typer.Argument(..., help="YAML config (see examples/sft_demo.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set train.steps=20 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the resolved config, row and token counts and "
                                 "one rendered example with its loss mask; train nothing, create no run."),
    force: bool = FORCE,
) -> None:
    """Supervised fine-tuning on conversations (assistant-only loss)."""
    from tempering.recipes.sft import run_sft
    from tempering.recipes.sft_dry_run import dry_run_sft

    run = (lambda cfg, force=False: dry_run_sft(cfg, out)) if dry_run else run_sft
    _train(SFTConfig, run, config, set_, model, steps, out_dir, name, full, force)


def _train(kind: type, run: Any, config: Path, set_: List[str], model: Optional[str], steps: Optional[int],
           out_dir: Optional[str], name: Optional[str], full: bool, force: bool = False) -> None:
    """Shared body of sft and grpo: config + flags -> run -> summary JSON."""
    from tempering.train.distributed import world

    literal = {"model": model, "train.steps": steps, "out": out_dir, "name": name}
    summary = train_from_config(kind, run, config, set_, literal, full, force)
    if world().main:  # under torchrun, rank 0 speaks for the run
        out.print_json(json.dumps(summary))


@app.command()
def grpo(
    config: Path = typer.Argument(..., help="YAML config (see examples/grpo_arith.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set grpo.group_size=4 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """RL with verifiable rewards (GRPO family): sample, verify, update."""
    from tempering.config import GRPOConfig
    from tempering.recipes.grpo import run_grpo

    _train(GRPOConfig, run_grpo, config, set_, model, steps, out_dir, name, full, force)


@app.command()
def agent(
    config: Path = typer.Argument(..., help="YAML config (see examples/agent/agent_arith.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set rl.group_size=4 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """Agent training in tool environments: expert SFT, then trajectory-level GRPO (docs/agents.md)."""
    from tempering.agents.config import AgentConfig
    from tempering.recipes.agent import run_agent

    _train(AgentConfig, run_agent, config, set_, model, steps, out_dir, name, full, force)


@app.command()
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
        table.add_row(str(r["step"]), r["task_id"], f"{r['reward']:.2f}", f"{r['advantage']:+.2f}",
                      ",".join(r["flags"]), r["completion"][:80].replace("\n", "\\n"))
    print_wide(out, table)
    out.print(f"{len(rows)} rollouts")


@data_app.command("validate")
def data_validate(
    files: List[Path] = typer.Argument(..., help="Data files (.jsonl, .json, .parquet, or a saved HF dataset dir); "
                                       "rows as messages, prompt/completion, ShareGPT or Alpaca."),
    model: str = typer.Option(DEFAULT_MODEL, help="Tokenizer/template used for the length and render checks."),
    max_length: int = typer.Option(2048, help="Rows rendering longer than this are bad."),
    render: bool = typer.Option(True, help="Also render with the chat template (checks length)."),
    quarantine: Optional[Path] = typer.Option(None, help="Write bad rows here (JSONL)."),
) -> None:
    """Validate rows without training; ends with one JSON line; exit 1 if any row is bad."""
    from tempering.data.io import NoRows, load_rows, write_quarantine

    try:
        loaded = load_rows([str(f) for f in files])
    except NoRows as exc:  # an empty file is bad data: exit 1 like a bad row
        fail(str(exc), 1)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if render and loaded.records:
        from tempering.data.render import detect_tool_call_style
        from tempering.models.load import load_tokenizer
        from tempering.data.render import render_records

        from tempering.data.render import TemplateError

        from tempering.models.load import ModelNotFound

        try:
            tokenizer = load_tokenizer(model)
        except ModelNotFound as exc:
            fail(str(exc))
        try:
            render_records(loaded, tokenizer, detect_tool_call_style(tokenizer), max_length)
        except TemplateError as exc:
            fail(f"chat template problem: {exc}")
    for e in loaded.errors:
        err.print(f"[yellow]{e}[/yellow]")
    if quarantine and loaded.errors:
        write_quarantine(loaded.errors, quarantine)
    print(json.dumps(loaded.summary()))
    raise typer.Exit(1 if loaded.errors else 0)


@app.command()
def verify(
    task: Path = typer.Option(..., "--task", help="One task as JSON (the task JSONL row format)."),
    completion: Path = typer.Option(..., "--completion", help="A file holding the completion text."),
) -> None:
    """Score a completion with the task's verifier; the Reward JSON is the last line."""
    from pydantic import ValidationError

    from tempering.types import Task
    from tempering.verifiers import UnknownVerifier, score

    for path, what in ((task, "task"), (completion, "completion")):
        if not path.is_file():
            fail(f"{path}: {what} file not found (--{what})")
    try:
        parsed = Task.model_validate_json(task.read_text(encoding="utf-8"))
    except ValidationError as exc:
        fail(f"{task}: invalid task: {exc.errors()[0]['msg']}")
    except UnicodeDecodeError as exc:
        fail(f"{task}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    from tempering.sandbox import SandboxUnavailable
    from tempering.verifiers import VerifierError

    try:
        text = completion.read_text(encoding="utf-8", errors="replace")
        reward = score(parsed, text)
    except UnknownVerifier as exc:
        fail(str(exc.args[0]))
    except KeyError as exc:  # the spec lacks a field its verifier needs (e.g. numeric without answer)
        fail(f"{task}: the {parsed.verifier.get('type')!r} verifier spec needs the field {exc.args[0]!r}; "
              f"add it to \"verifier\"")
    except (VerifierError, SandboxUnavailable) as exc:
        fail(f"the verifier could not judge (not the completion's fault): {exc}", code=3)
    print(reward.model_dump_json())


@app.command()
def export(
    adapter: Path = typer.Argument(..., help="A PEFT adapter directory (e.g. runs/NAME/final)."),
    out_dir: Path = typer.Option(..., "--out", help="Where to write the merged HF model."),
    dtype: str = typer.Option("fp32", "--dtype", help="Weights of the merged model: fp32, bf16 or fp16."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty --out dir (replacing its files)."),
) -> None:
    """Merge a LoRA adapter into its base model and save a standalone HF directory.

    The export is recorded as a run of the adapter's registry and marked, so the
    contamination scan of the exported model still sees what the adapter was trained on.
    """
    from tempering.models.load import adapter_base
    from tempering.models.lora import EXPORT_DTYPES, export_merged
    from tempering.pipeline.stage import record_export

    if dtype not in EXPORT_DTYPES:
        fail(f"--dtype {dtype!r} is not one of {', '.join(EXPORT_DTYPES)}")
    if adapter_base(str(adapter)) is None:
        fail(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
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


@model_app.command("resolve")
def model_resolve(spec: str = typer.Argument(DEFAULT_MODEL)) -> None:
    """Print the local HF directory for a model spec (converting a GGUF once)."""
    from tempering.models.load import ModelNotFound, resolve_model

    try:
        print(resolve_model(spec))
    except ModelNotFound as exc:
        fail(str(exc))


@app.command()
def demo(
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", help="The demo pipeline (default: examples/demo.yaml "
                                            "here, else in the Tempering source tree)."),
    out: Optional[str] = typer.Option(None, "--out", help="Run root (default: the file's `out`, runs/demo)."),
) -> None:
    """The main job, small: eval -> flywheel data -> SFT -> GRPO -> eval -> gate -> release, then before/after."""
    from tempering.cli_pipe import EXIT_CODES, execute, print_outcome
    from tempering.pipeline.stage import StageError
    from tempering.recipes.demo import DemoError, demo_pipeline, summarize
    from tempering.recipes.loop import PipelineError, load_plan
    from tempering.train.metrics import console

    try:
        plan = load_plan(demo_pipeline(pipeline))
        if out is not None:
            plan.root = Path(out).expanduser().resolve()
        console.rule(f"[bold]Tempering demo: the closed loop on the default model ({plan.path})")
        result = execute(plan)
    except (DemoError, PipelineError, StageError) as exc:
        fail(" ".join(str(exc).split()))
    print_outcome(result, rule_prefix="gate ", json_line=False)
    summarize(result, plan.root, console)
    raise typer.Exit(EXIT_CODES[result.status])


from tempering.cli_chat import chat  # noqa: E402  (sub-commands defined in their own modules)
from tempering.cli_eval import eval_app  # noqa: E402
from tempering.cli_eval_show import eval_show  # noqa: E402

app.command("chat")(chat)
eval_app.command("show")(eval_show)
app.add_typer(eval_app, name="eval")
from tempering.cli_datatools import data_decontam, data_dedup  # noqa: E402  (branch dedup)

data_app.command("dedup")(data_dedup)
data_app.command("decontam")(data_decontam)
from tempering.cli_mix import data_failures, data_mix, data_stratify, data_synth  # noqa: E402
data_app.command("mix")(data_mix)
data_app.command("stratify")(data_stratify)
data_app.command("synth")(data_synth)
data_app.command("failures")(data_failures)
from tempering.cli_pref import dpo  # noqa: E402
app.command("dpo")(dpo)
from tempering.cli_agree import data_agree, data_audit, data_pairs  # noqa: E402
data_app.command("pairs")(data_pairs)
data_app.command("agree")(data_agree)
data_app.command("audit")(data_audit)
from tempering.cli_rm import best_of_n_cmd, rm  # noqa: E402
app.command("rm")(rm)
app.command("best-of-n")(best_of_n_cmd)
from tempering.cli_pipe import run_pipeline_cmd  # noqa: E402  (branch pipe)
app.command("run")(run_pipeline_cmd)
from tempering.cli_reg import lineage, release_app, runs_app  # noqa: E402  (branch reg)
app.add_typer(runs_app, name="runs")
app.command("lineage")(lineage)
app.add_typer(release_app, name="release")
from tempering.cli_merge import merge  # noqa: E402  (branch merge)
app.command("merge")(merge)
from tempering.cli_serve import arena_app, feedback_app, keys_app, serve  # noqa: E402  (branch serve)
app.command("serve")(serve)
app.add_typer(keys_app, name="keys")
app.add_typer(feedback_app, name="feedback")
app.add_typer(arena_app, name="arena")
from tempering.cli_spec import distill  # noqa: E402  (branch spec)
app.command("distill")(distill)

if __name__ == "__main__":
    app()
