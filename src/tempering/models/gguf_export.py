"""GGUF export through llama.cpp's own converter (`convert_hf_to_gguf.py`).

The converter is not a package of its own: it ships inside the source distribution of the PyPI
package `llama-cpp-python` (`vendor/llama.cpp`: the script, its `conversion/` modules and the
matching `gguf-py`). `install_converter` takes those three out of that sdist (downloaded by pip,
or a file already here) into the cache dir, once; `export_gguf` then runs the script on a
Hugging Face directory with this Python. `$TEMPERING_LLAMA_CPP` may name a llama.cpp source tree
to use instead. Nothing here builds llama.cpp: quantising below q8_0 needs its C++ tools.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tempering.atomic import atomic_path, publish_dir

LLAMA_CPP_PYTHON = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp converts
OUTTYPES = ("f32", "f16", "bf16", "q8_0", "auto")
SCRIPT = "convert_hf_to_gguf.py"
_PARTS = (SCRIPT, "conversion", "gguf-py")


class GGUFExportError(RuntimeError):
    """The converter is missing or refused the model (one line)."""


def converter_dir() -> Path:
    """The llama.cpp tree holding the converter: `$TEMPERING_LLAMA_CPP`, else the installed copy.

    Raises:
        GGUFExportError: neither is there (the message says how to install it).
    """
    from tempering.models.load import cache_dir

    given = os.environ.get("TEMPERING_LLAMA_CPP")
    path = Path(given).expanduser() if given else cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON}"
    if not (path / SCRIPT).is_file():
        where = f"TEMPERING_LLAMA_CPP={given} holds no {SCRIPT}" if given else f"{SCRIPT} is not installed"
        raise GGUFExportError(
            f"{where}; run `temper model gguf-converter` once (pip downloads the llama-cpp-python "
            f"{LLAMA_CPP_PYTHON} source, {SCRIPT} is taken from it), or pass --sdist with that file"
        )
    return path


def install_converter(sdist: Path | None = None) -> Path:
    """Take the converter out of the llama-cpp-python sdist (downloaded by pip when `sdist` is None)."""
    from tempering.models.load import cache_dir

    out = cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON}"
    if (out / SCRIPT).is_file():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        if sdist is None:
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp]
            done = subprocess.run([*pip, f"llama-cpp-python=={LLAMA_CPP_PYTHON}"], capture_output=True, text=True)
            if done.returncode:
                raise GGUFExportError(f"pip could not download llama-cpp-python {LLAMA_CPP_PYTHON}: {_last(done)}")
            sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar, publish_dir(out) as dest:
            members = [m for m in tar.getmembers() if m.name.removeprefix(prefix).split("/")[0] in _PARTS]
            if not any(m.name == prefix + SCRIPT for m in members):
                raise GGUFExportError(
                    f"{sdist}: no {prefix}{SCRIPT} in it (expected llama-cpp-python {LLAMA_CPP_PYTHON})"
                )
            for m in members:
                m.name = m.name.removeprefix(prefix)
            tar.extractall(dest, members=members, filter="data")
    return out


def export_gguf(model_dir: str | Path, out: Path, outtype: str = "f16") -> Path:
    """Convert a Hugging Face model directory (a full model, not an adapter) into `out` (GGUF).

    Raises:
        GGUFExportError: no converter, or the converter failed (its last error line).
    """
    if outtype not in OUTTYPES:
        raise GGUFExportError(f"--outtype {outtype!r} is not one of {', '.join(OUTTYPES)}")
    script = converter_dir() / SCRIPT
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # the converter's own gguf-py
    with atomic_path(out) as tmp:
        cmd = [sys.executable, str(script), str(model_dir), "--outtype", outtype, "--outfile", str(tmp)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode or not tmp.is_file() or not tmp.stat().st_size:
            raise GGUFExportError(f"{SCRIPT} failed on {model_dir}: {_last(done)}")
    return out


def _last(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"
