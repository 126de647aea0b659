"""Make the Q8_0 GGUF of the default model that bench/throughput/inference.py runs through llama.cpp.

llama-cpp-python is a dev-only peer that `make` never installs: it builds from its source
distribution (about 20 minutes on 2 cores here, at nice 19):

    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF" pip wheel --no-deps llama-cpp-python==0.3.36
    pip install llama_cpp_python-*.whl
    tar xzf llama_cpp_python-0.3.36.tar.gz          # for llama.cpp's converter (vendor/llama.cpp)
    python bench/diagnostics/make_q8_gguf.py --llama-cpp-src llama_cpp_python-0.3.36/vendor/llama.cpp --out q8.gguf
    TEMPERING_Q8_GGUF=q8.gguf python bench/throughput/inference.py

The GGUF is made from the very weights every other side of the bench loads (the HF directory
Tempering converts the default model into), with llama.cpp's own `convert_hf_to_gguf.py`
(f32), then `llama_model_quantize` to Q8_0.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--llama-cpp-src", type=Path, required=True, help="llama.cpp source (convert_hf_to_gguf.py)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    import llama_cpp

    from tempering.models.load import resolve_model

    hf_dir = resolve_model("smollm2-135m-instruct")
    f32 = args.out.with_suffix(".f32.gguf")
    env = {**os.environ, "PYTHONPATH": str(args.llama_cpp_src / "gguf-py")}
    subprocess.run(
        [
            sys.executable,
            str(args.llama_cpp_src / "convert_hf_to_gguf.py"),
            hf_dir,
            "--outtype",
            "f32",
            "--outfile",
            str(f32),
        ],
        check=True,
        env=env,
    )
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    if llama_cpp.llama_model_quantize(str(f32).encode(), str(args.out).encode(), ctypes.byref(params)) != 0:
        raise SystemExit("llama_model_quantize failed")
    f32.unlink()
    print(args.out)


if __name__ == "__main__":
    main()
