"""Atomic, verified, pruned checkpoints.

Layout of `<run>/checkpoints/step-00000010/`:
    weights.safetensors   trainable parameters (all of them for full fine-tuning, adapters for LoRA)
    optimizer.pt          optimizer state
    rng.pt                python / numpy / torch RNG states (every rank's under torchrun)
    state.json            step, data position, guard and schedule state
    manifest.json         sha256 of every file above; written last

A checkpoint is written into a hidden temp dir and renamed into place, so a crash never
leaves a half-written `step-*`. Loading recomputes every hash and refuses a mismatch.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from tempering.atomic import fsync_file
from tempering.hashing import sha256_file

MANIFEST = "manifest.json"
FORMAT = 1


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or corrupted."""


CORRUPT_PREFIX = "corrupt-"


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: Path,
    step: int,
    weights: dict[str, torch.Tensor],
    optimizer: dict,
    state: dict,
    keep_last: int,
    rng: Any = None,
) -> Path:
    """Write checkpoint `step` atomically, then prune to the newest `keep_last`.

    `rng`: what rng.pt holds (default: this process's `rng_state()`; a multi-process trainer
    passes every rank's).
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".step-{step:08d}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, tmp / "weights.safetensors")
    torch.save(optimizer, tmp / "optimizer.pt")
    torch.save(rng if rng is not None else rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
    (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "step": step, "files": files}, indent=1))
    for p in tmp.iterdir():  # durable before it becomes visible
        fsync_file(p)
    aside = root / f".step-{step:08d}.old-{os.getpid()}"
    if final.exists():  # same step written again (after a rollback): swap, never delete first
        os.rename(final, aside)
    os.rename(tmp, final)
    shutil.rmtree(aside, ignore_errors=True)
    for old in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old)
    return final


def remove_partial(root: Path) -> list[Path]:
    """Clean up after a writer killed mid-save; returns what was removed.

    Temp dirs are incomplete by definition. A checkpoint moved aside for a rewrite of the
    same step is put back if its replacement never landed, else deleted.
    """
    if not root.is_dir():
        return []
    removed = list(root.glob(".step-*.tmp-*"))
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    for old in root.glob(".step-*.old-*"):
        final = root / old.name[1:].split(".old-")[0]
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
        else:
            os.rename(old, final)
    return removed


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints (renamed into place), oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if p.is_dir())


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


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Verify, then read a checkpoint: {weights, optimizer, rng, state}."""
    verify_checkpoint(path)
    return {
        "weights": load_file(path / "weights.safetensors"),
        # Our own files, verified by hash above; they hold python objects (RNG tuples).
        "optimizer": torch.load(path / "optimizer.pt", weights_only=False),
        "rng": torch.load(path / "rng.pt", weights_only=False),
        "state": json.loads((path / "state.json").read_text()),
    }


def fall_back_to_verified(root: Path) -> list[Path]:
    """Make the newest *verified* checkpoint the newest one; returns the checkpoints set aside.

    A resume loads the newest `step-*`. When that one fails verification (a crash in a
    filesystem that lost writes, a disk error, someone else's writer), the previous verified
    checkpoint is still a correct place to resume from: newer bad ones are renamed to
    `corrupt-step-*` (kept for inspection, invisible to `list_checkpoints`).

    Raises:
        CheckpointError: checkpoints exist but none verifies (nothing safe to resume from).
    """
    existing = list_checkpoints(root)
    bad: list[tuple[Path, CheckpointError]] = []
    for path in reversed(existing):
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            bad.append((path, exc))
            continue
        aside = []
        for corrupt, _ in bad:
            target = corrupt.with_name(CORRUPT_PREFIX + corrupt.name)
            shutil.rmtree(target, ignore_errors=True)
            os.rename(corrupt, target)
            aside.append(target)
        return aside
    if bad:
        raise CheckpointError(
            f"{bad[0][1]} (and no older checkpoint verifies either: start a new run with "
            f"another --name, or delete {root})"
        )
    return []
