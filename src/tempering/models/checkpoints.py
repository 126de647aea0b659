"""A training checkpoint as a model spec: `runs/NAME/checkpoints/step-40`, `runs/NAME@step-40`,
`runs/NAME@latest`, `runs/NAME@best`.

A checkpoint (`train/checkpoint.py` writes it) holds only the trainable parameters: the LoRA
adapters, or every weight of a full fine-tune. To chat with it, evaluate it or export it, it is
written once as a normal Hugging Face directory under the cache dir, keyed by its manifest: a
PEFT adapter (`adapter_config.json` naming the run's base model and exactly the adapted modules,
`adapter_model.safetensors`) or a full model (the base's `config.json` beside the weights), with
the tokenizer the run trained with (its `chat_template` included). No model is built for it. The
run's lineage marker goes with it, so the leakage scan still finds what trained it.

The manifest check lives here (below `train/`, which writes checkpoints and resumes from them)
so that loading a model and resuming a run verify a checkpoint the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable

from tempering.atomic import publish_dir, write_text_atomic
from tempering.errors import UserError
from tempering.hashing import sha256_file

MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
RUN_CONFIG = "run_config.json"  # written by runs/stage.py into every run dir
SOURCE = "tempering_source.json"  # written last into a converted dir: what it was made from
_AT = re.compile(r"(?P<run>.+)@(?P<which>step-\d+|latest|best)")
_STEP = re.compile(r"step-(\d+)")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is missing, incomplete or corrupted."""


def verify_checkpoint(path: Path) -> dict:
    """Check every file against the manifest; returns the manifest.

    Raises:
        CheckpointError: naming the checkpoint, the file and what is wrong.
    """
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {path} has no {MANIFEST}: incomplete or not a checkpoint; refusing to load")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"checkpoint {path}: {MANIFEST} is not valid JSON ({exc.msg}); refusing to load"
        ) from None
    for name, expected in manifest["files"].items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path}: {name} is missing; refusing to load")
        actual = sha256_file(f)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {path}: {name} is corrupted (sha256 {actual[:12]}... != manifest "
                f"{expected[:12]}...); refusing to load"
            )
    return manifest


def is_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint dir (a manifest beside the weights)."""
    return (path / MANIFEST).is_file() and (path / WEIGHTS).is_file()


def is_checkpoint_spec(spec: str) -> bool:
    """Whether `spec` is spelled as a checkpoint (`RUN@step-N|latest|best`, `.../checkpoints/step-N`),
    whether or not it is there."""
    path = Path(spec)
    return _AT.fullmatch(spec) is not None or (
        _STEP.fullmatch(path.name) is not None and path.parent.name == "checkpoints"
    )


def checkpoint_path(spec: str) -> Path | None:
    """The dir a checkpoint spec names, or None when `spec` is no checkpoint spec.

    `RUN@step-N` (N as written or zero-padded), `RUN@latest`, `RUN@best` (the run's `best/`
    model, written by `train.keep_best`), or a `checkpoints/step-N` path with an unpadded N.

    Raises:
        CheckpointError: `RUN@...` names a run dir or a step that is not there (one line, listing what is).
    """
    match = _AT.fullmatch(spec)
    if match is None:
        path = Path(spec).expanduser()
        step = _STEP.fullmatch(path.name)
        if step and not path.exists() and path.parent.name == "checkpoints":
            return _step_dir(path.parent, int(step.group(1)), spec)
        return path if path.is_dir() and is_checkpoint(path) else None
    run, which = Path(match["run"]).expanduser(), match["which"]
    if not run.is_dir():
        raise CheckpointError(f"{spec}: run dir {run} not found")
    if which == "best":
        if not (run / "best").is_dir():
            raise CheckpointError(f"{spec}: {run} has no best/ model (train it with train.keep_best: METRIC)")
        return run / "best"
    steps = _steps(run / "checkpoints")
    if not steps:
        raise CheckpointError(f"{spec}: {run} has no checkpoints")
    if which == "latest":
        return steps[-1]
    return _step_dir(run / "checkpoints", int(which.removeprefix("step-")), spec)


def _steps(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("step-*") if p.is_dir()) if root.is_dir() else []


def _step_dir(root: Path, step: int, spec: str) -> Path:
    path = root / f"step-{step:08d}"
    if not path.is_dir():
        have = ", ".join(str(int(p.name.removeprefix("step-"))) for p in _steps(root)) or "none"
        raise CheckpointError(f"{spec}: no checkpoint at step {step} in {root} (steps kept: {have})")
    return path


def checkpoint_model(path: Path, cache: Path, resolve: Callable[[str], str]) -> Path:
    """The HF directory (adapter or full model) made from checkpoint `path`, once, under `cache`.

    `resolve` turns the run's model spec into a local directory (`models.load.resolve_model`).

    Raises:
        CheckpointError: the checkpoint fails its manifest, or its run's config is missing or
            names no model (one line each).
    """
    from safetensors.torch import load_file

    manifest = verify_checkpoint(path)
    out = cache / f"checkpoint-{hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]}"
    if (out / SOURCE).is_file():
        return out
    run_dir = path.parent.parent
    config_file = run_dir / RUN_CONFIG
    if not config_file.is_file():
        raise CheckpointError(f"checkpoint {path}: its run dir has no {RUN_CONFIG}, so the model it trains is unknown")
    config = json.loads(config_file.read_text())
    if not isinstance(config.get("model"), str) or "lora" not in config:
        raise CheckpointError(
            f"checkpoint {path}: its run's {RUN_CONFIG} names no `model` and `lora`, so only its final/ "
            "model can be loaded"
        )
    start = Path(resolve(config["model"]))
    adapter = _adapter_config(start)
    base = Path(resolve(adapter["base_model_name_or_path"])) if adapter else start
    with publish_dir(out) as tmp:
        weights = load_file(path / WEIGHTS)
        if any(".lora_A." in name for name in weights):
            _write_adapter(weights, config, adapter, base, tmp)
        else:
            _write_full(weights, base, tmp)
        _write_rope_record(config, start, tmp)
        _write_tokenizer(start if (start / "tokenizer_config.json").is_file() else base, config, tmp)
        marker = run_dir / "tempering-run.json"
        if marker.is_file():
            shutil.copy(marker, tmp / marker.name)
        write_text_atomic(tmp / SOURCE, json.dumps({"checkpoint": str(path.resolve())}))
    return out


def _adapter_config(path: Path) -> dict[str, Any] | None:
    file = path / "adapter_config.json"
    return json.loads(file.read_text()) if file.is_file() else None


def _write_adapter(weights: dict, config: dict, adapter: dict | None, base: Path, out: Path) -> None:
    """A PEFT adapter dir: the trainer's `...lora_A.default.weight` names without the adapter name,
    `target_modules` as a regex matching exactly the modules that hold adapters."""
    from safetensors.torch import save_file

    saved = {name.replace(".default.", "."): t.contiguous() for name, t in weights.items()}
    modules = sorted({name.split(".lora_")[0].removeprefix("base_model.model.") for name in saved})
    rank = next(t.shape[0] for name, t in saved.items() if ".lora_A." in name)
    lora = config["lora"] or {}
    alpha = adapter["lora_alpha"] if adapter else lora.get("alpha", 2 * rank)
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base.resolve()),
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": lora.get("dropout", 0.0),
        "target_modules": "|".join(re.escape(m) for m in modules),
        "bias": "none",
        "inference_mode": True,
    }
    save_file(saved, out / "adapter_model.safetensors", metadata={"format": "pt"})
    write_text_atomic(out / "adapter_config.json", json.dumps(adapter_config, indent=1))


def _write_full(weights: dict, base: Path, out: Path) -> None:
    """A full model dir: every weight (named as the model names its parameters) and the base's config."""
    from safetensors.torch import save_file

    for name in ("config.json", "generation_config.json"):
        if (base / name).is_file():
            shutil.copy(base / name, out / name)
    save_file({k: t.contiguous() for k, t in weights.items()}, out / "model.safetensors", metadata={"format": "pt"})


def _write_rope_record(config: dict, start: Path, out: Path) -> None:
    """The run's `rope_scaling` (or the one its starting adapter recorded) beside the rebuilt model:
    its config.json is the unscaled base's, so `load_model` re-applies the scaling from this."""
    from tempering.config import RopeScaling
    from tempering.models.rope import recorded_scaling, write_record

    given = config.get("rope_scaling")
    scaling = RopeScaling.model_validate(given) if given else recorded_scaling(start)
    if scaling is not None:
        write_record(scaling, out)


def _write_tokenizer(source: Path, config: dict, out: Path) -> None:
    from transformers import AutoTokenizer

    from tempering.models.chat_template import apply_chat_template

    tokenizer = AutoTokenizer.from_pretrained(source)
    if config.get("chat_template"):
        apply_chat_template(tokenizer, config["chat_template"])
    tokenizer.save_pretrained(out)
