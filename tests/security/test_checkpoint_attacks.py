"""Attacks through the run dir: whoever can write a checkpoint must not run code on resume.

A checkpoint's manifest proves its files belong together, not who wrote them: an attacker who
can write the run dir rewrites the manifest too (every attack here does). What stands between
a planted file and code execution is that nothing in `src/` unpickles a file freely: the RNG
states are safetensors, optimizer.pt goes through torch's weights-only loader, and a scan of
the tree fails on any `pickle.load` or `torch.load` without `weights_only=True`.
"""

import ast
import json
import os
from pathlib import Path

import pytest
import torch
from tests.train.test_trainer import make_trainer

import tempering
from tempering.hashing import sha256_file
from tempering.train.checkpoint import MANIFEST, CheckpointError, list_checkpoints, rng_state

SRC = Path(tempering.__file__).resolve().parent  # the package under test, wherever it is imported from


@pytest.fixture(autouse=True)
def host_guard():
    """These attacks target files, not the sandbox: no pool to start or check afterwards."""
    yield


# --- the scan: no free unpickling anywhere in src/ ---

PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib"}
PICKLE_READERS = {"load", "loads", "Unpickler", "read_pickle"}


def _kwarg(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def free_unpickling(source: str) -> list[int]:
    """Lines of `source` that may unpickle a file: a pickle-family reader (by module attribute or
    imported name), `torch.load` without a literal `weights_only=True`, `numpy.load` with
    `allow_pickle=True`, `pandas.read_pickle`."""
    tree = ast.parse(source)
    readers = set()  # names bound by `from pickle import load` and the like
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLE_MODULES:
            readers |= {a.asname or a.name for a in node.names if a.name in PICKLE_READERS}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if (
            (owner in PICKLE_MODULES and name in PICKLE_READERS)
            or (owner is None and name in readers)
            or (owner == "torch" and name == "load" and not _is_true(_kwarg(node, "weights_only")))
            or (owner in ("np", "numpy") and name == "load" and _is_true(_kwarg(node, "allow_pickle")))
            or (owner in ("pd", "pandas") and name == "read_pickle")
        ):
            lines.append(node.lineno)
    return lines


def unpickling_in(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        for line in free_unpickling(path.read_text(encoding="utf-8"))
    ]


def test_nothing_in_src_unpickles_a_file_freely():
    """A file anyone can write (a run dir, a cache) is read as data, never as a pickle."""
    assert unpickling_in(SRC) == []


def test_a_planted_unpickling_is_caught(tmp_path):
    (tmp_path / "ok.py").write_text(
        '"""torch.load(p, weights_only=False) in a docstring is no call."""\n'
        "import torch\n"
        "x = torch.load(p, weights_only=True)\n"
    )
    (tmp_path / "ckpt.py").write_text(
        "import torch, pickle\na = torch.load(p, weights_only=False)\nb = torch.load(p)\nc = pickle.loads(blob)\n"
    )
    (tmp_path / "aliased.py").write_text(
        "from pickle import load as read\nimport numpy as np\nd = read(f)\ne = np.load(p, allow_pickle=True)\n"
    )
    assert unpickling_in(tmp_path) == ["aliased.py:3", "aliased.py:4", "ckpt.py:2", "ckpt.py:3", "ckpt.py:4"]


# --- planted files in a real checkpoint ---


class WritesMarker:
    """A pickle payload: unpickling it calls os.system, which creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A run dir with one real checkpoint (step 5) of the tiny model; returns (run dir, checkpoint)."""
    run = tmp_path / "run"
    make_trainer(run, steps=5).fit()
    return run, list_checkpoints(run / "checkpoints")[-1]


def _plant(ckpt: Path, name: str, payload: object, *, drop: str | None = None) -> None:
    """Write `payload` pickled as `name` (dropping `drop`) and rewrite the manifest to match, as
    an attacker with write access to the run dir can."""
    if drop:
        (ckpt / drop).unlink(missing_ok=True)
    torch.save(payload, ckpt / name)  # the pickle-in-a-zip torch.load reads
    _rewrite_manifest(ckpt)


def _rewrite_manifest(ckpt: Path) -> None:
    manifest = json.loads((ckpt / MANIFEST).read_text())
    files = {p.name: sha256_file(p) for p in sorted(ckpt.iterdir()) if p.name != MANIFEST}
    (ckpt / MANIFEST).write_text(json.dumps({**manifest, "files": files}))


@pytest.mark.parametrize(
    "planted, dropped",
    [
        ("rng.safetensors", None),  # the RNG file replaced by a pickle
        ("rng.pt", "rng.safetensors"),  # the older layout's pickled RNG file
        ("optimizer.pt", None),  # the optimizer state replaced by a pickle
    ],
)
def test_a_planted_pickle_in_a_checkpoint_never_runs_on_resume(tmp_path, planted, dropped):
    run, ckpt = _checkpoint(tmp_path)
    marker = tmp_path / "pwned"
    _plant(ckpt, planted, WritesMarker(marker), drop=dropped)
    with pytest.raises(Exception) as caught:  # noqa: PT011 (the marker is checked before the type)
        make_trainer(run, steps=10).fit()
    assert not marker.exists(), "unpickling the planted file ran its code"
    assert isinstance(caught.value, CheckpointError), repr(caught.value)
    message = str(caught.value)
    assert planted in message and str(ckpt) in message and "\n" not in message


def test_a_checkpoint_of_the_older_format_is_refused_naming_its_rng_file(tmp_path):
    """An honest rng.pt from before (a pickled rng_state()) is refused too: telling it from a
    malicious one would take unpickling it."""
    run, ckpt = _checkpoint(tmp_path)
    (ckpt / "rng.safetensors").unlink(missing_ok=True)
    torch.save(rng_state(), ckpt / "rng.pt")
    _rewrite_manifest(ckpt)
    with pytest.raises(CheckpointError, match=r"rng\.pt is a pickle written by an older Tempering"):
        make_trainer(run, steps=10).fit()
