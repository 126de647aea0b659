"""Atomic, verified, pruned checkpoints.

Layout of `<run>/checkpoints/step-00000010/`:
    weights.safetensors   trainable parameters (all of them for full fine-tuning, adapters for LoRA)
    optimizer.pt          optimizer state (tensors and plain values: loaded with weights_only=True)
    rng.safetensors       python / numpy / torch RNG states (every rank's under torchrun), no pickle
    state.json            step, data position, guard and schedule state
    manifest.json         sha256 of every file above; written last

A checkpoint is written into a hidden temp dir and renamed into place, so a crash never
leaves a half-written `step-*`. Loading recomputes every hash and refuses a mismatch.

Nothing in a checkpoint is unpickled freely. The manifest only proves the files belong
together, not who wrote them: anyone who can write the run dir can rewrite it too. So the RNG
states are arrays and numbers in a safetensors file (its JSON header holds the scalars), and
optimizer.pt goes through torch's weights-only loader, which builds tensors and plain
containers and refuses any other object. A checkpoint of the older format (an `rng.pt`
pickle) is refused with a one-line error naming the file, never loaded.

The Tinker service's `save_state` is this format too (`write_checkpoint` into the dir the client
names, its base, rank and LoRA parts in state.json under "tinker", the PEFT adapter beside it):
`load_checkpoint` reads either.

Any checkpoint is also a model spec (`runs/NAME@step-40`): models/checkpoints.py rebuilds it
into a loadable directory, verified by the same manifest check.
"""

from __future__ import annotations

import json
import os
import pickle  # for its error class: nothing here unpickles freely
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from tempering.atomic import fsync_file, write_text_atomic
from tempering.hashing import sha256_file
from tempering.models.checkpoints import MANIFEST as MANIFEST  # re-exported: defined below train/
from tempering.models.checkpoints import CheckpointError, verify_checkpoint

FORMAT = 1
RNG_FILE = "rng.safetensors"
LEGACY_RNG_FILE = "rng.pt"  # a pickle, written before RNG_FILE: refused, never loaded
_RNG_FORMAT = "tempering-rng-1"


CORRUPT_PREFIX = "corrupt-"


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():  # cuda-path: cuda-rng
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():  # cuda-path: cuda-rng
        torch.cuda.set_rng_state_all(state["cuda"])


def _rng_to_tensors(rng: dict[str, Any], rank: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One process's RNG state as tensors (named `<rank>.<part>`) and the scalars beside them."""
    py_version, py_internal, py_gauss = rng["python"]
    np_alg, np_keys, np_pos, np_has_gauss, np_cached = rng["numpy"]
    tensors = {
        f"{rank}.python": torch.tensor(py_internal, dtype=torch.int64),  # 624 words + index, all < 2**32
        f"{rank}.numpy": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
        f"{rank}.torch": rng["torch"],
    }
    cuda = list(rng.get("cuda", []))  # cuda-path: cuda-rng
    tensors |= {f"{rank}.cuda.{i}": t for i, t in enumerate(cuda)}
    scalars = {
        "python": [py_version, py_gauss],
        "numpy": [np_alg, int(np_pos), int(np_has_gauss), float(np_cached)],
        "cuda": len(cuda),  # cuda-path: cuda-rng
    }
    return tensors, scalars


def _rng_from_tensors(tensors: dict[str, torch.Tensor], scalars: dict[str, Any], rank: int) -> dict[str, Any]:
    """The inverse of `_rng_to_tensors`: the state `set_rng_state` takes."""
    py_version, py_gauss = scalars["python"]
    np_alg, np_pos, np_has_gauss, np_cached = scalars["numpy"]
    state = {
        "python": (int(py_version), tuple(int(x) for x in tensors[f"{rank}.python"].tolist()), py_gauss),
        "numpy": (str(np_alg), tensors[f"{rank}.numpy"].numpy().astype(np.uint32), np_pos, np_has_gauss, np_cached),
        "torch": tensors[f"{rank}.torch"],
    }
    if scalars["cuda"]:  # cuda-path: cuda-rng
        state["cuda"] = [tensors[f"{rank}.cuda.{i}"] for i in range(int(scalars["cuda"]))]
    return state


def save_rng(rng: dict[str, Any], path: Path) -> None:
    """Write `rng` (one process's `rng_state()`, or `{"ranks": [...]}`) as safetensors, no pickle."""
    ranks = rng["ranks"] if "ranks" in rng else [rng]
    tensors: dict[str, torch.Tensor] = {}
    scalars = []
    for rank, state in enumerate(ranks):
        t, s = _rng_to_tensors(state, rank)
        tensors |= t
        scalars.append(s)
    meta = {"format": _RNG_FORMAT, "multi_rank": json.dumps("ranks" in rng), "ranks": json.dumps(scalars)}
    save_file({k: v.contiguous().cpu() for k, v in tensors.items()}, path, metadata=meta)


def load_rng(path: Path) -> dict[str, Any]:
    """Read what `save_rng` wrote; only arrays and JSON are parsed, so no code can run.

    Raises:
        CheckpointError: the file is not an RNG state file of this format (one line, naming it).
    """
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is no mapping)
        if meta.get("format") != _RNG_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {_RNG_FORMAT!r}")
        ranks = [_rng_from_tensors(tensors, s, r) for r, s in enumerate(json.loads(meta["ranks"]))]
        multi = json.loads(meta["multi_rank"])
    except (SafetensorError, OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{path}: not an RNG state file ({' '.join(str(exc).split())}); refusing to load"
        ) from None
    return {"ranks": ranks} if multi else ranks[0]


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

    `rng`: what rng.safetensors holds (default: this process's `rng_state()`; a multi-process trainer
    passes every rank's).
    """
    final = write_checkpoint(root / f"step-{step:08d}", step, weights, optimizer, state, rng)
    for old in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old)
    return final


def write_checkpoint(
    final: Path,
    step: int,
    weights: dict[str, torch.Tensor],
    optimizer: dict,
    state: dict,
    rng: Any = None,
    extra: Callable[[Path], Any] | None = None,
) -> Path:
    """Write the checkpoint dir `final` atomically: the files of the layout above, in a hidden temp dir
    beside it, the manifest last, then renamed into place (an existing `final` is swapped out, never
    deleted first). `extra(dir)` writes more files into it before the manifest, which hashes them too
    (the Tinker service's PEFT copy of the adapter). The Trainer's `step-*` dirs and the Tinker
    service's `save_state` dirs are both written here; `load_checkpoint` reads either.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, tmp / "weights.safetensors")
    torch.save(optimizer, tmp / "optimizer.pt")
    save_rng(rng if rng is not None else rng_state(), tmp / RNG_FILE)
    write_text_atomic(tmp / "state.json", json.dumps(state, indent=1))
    if extra is not None:
        extra(tmp)
    files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    write_text_atomic(tmp / MANIFEST, json.dumps({"format": FORMAT, "step": step, "files": files}, indent=1))
    for p in tmp.rglob("*"):  # durable before it becomes visible
        if p.is_file():
            fsync_file(p)
    aside = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():  # same step written again (after a rollback): swap, never delete first
        os.rename(final, aside)
    os.rename(tmp, final)
    shutil.rmtree(aside, ignore_errors=True)
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


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Verify, then read a checkpoint: {weights, optimizer, rng, state}.

    Raises:
        CheckpointError: a file fails its hash, an older checkpoint holds a pickled `rng.pt`,
            or optimizer.pt holds anything but tensors and plain values (one line each).
    """
    verify_checkpoint(path)
    if not (path / RNG_FILE).is_file() and (path / LEGACY_RNG_FILE).is_file():
        raise CheckpointError(
            f"checkpoint {path}: {LEGACY_RNG_FILE} is a pickle written by an older Tempering and is not "
            f"loaded (unpickling a file can run code); resume from a checkpoint with {RNG_FILE}, or start a new run"
        )
    try:
        optimizer = torch.load(path / "optimizer.pt", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError):
        raise CheckpointError(
            f"checkpoint {path}: optimizer.pt holds objects other than tensors and plain values (torch's "
            f"weights-only loader refused it); refusing to load"
        ) from None
    return {
        "weights": load_file(path / "weights.safetensors"),
        "optimizer": optimizer,
        "rng": load_rng(path / RNG_FILE),
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
