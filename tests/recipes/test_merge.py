"""Merging tracks on tiny in-process models: PEFT's weighted adapters checked against
independent computations from the saved factors and merged weights, mergekit's linear merge
against the weighted average, and the one-line refusals (other base, broken tokenizer)."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import LoraSettings, MergeConfig
from tempering.models.load import load_model
from tempering.models.lora import apply_lora
from tempering.recipes.merge import MergeError, run_merge, tokenizer_roundtrip
from tempering.runs.registry import Registry, read_marker
from tests.conftest import tiny_llama

IDS = torch.tensor([[5, 17, 300, 42, 9, 1000, 7, 3]])


def _save_base(path: Path, tokenizer, seed: int) -> Path:
    model = tiny_llama(vocab=len(tokenizer), seed=seed, tie=True)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _save_adapter(path: Path, base: Path, tokenizer, seed: int, r: int = 4) -> Path:
    """A LoRA adapter over `base` with random (nonzero) A and B factors, saved like a run's final/."""
    model = apply_lora(load_model(str(base)), LoraSettings(r=r, alpha=2 * r), str(base))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    model.save_pretrained(path, save_embedding_layers=False)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tracks(tmp_path_factory, smol_tokenizer):
    root = tmp_path_factory.mktemp("merge")
    base = _save_base(root / "base", smol_tokenizer, seed=0)
    return {
        "root": root,
        "base": base,
        "a": _save_adapter(root / "a", base, smol_tokenizer, seed=1),
        "b": _save_adapter(root / "b", base, smol_tokenizer, seed=2),
    }


def _merge(tmp_path, inputs, name, **kw):
    cfg = MergeConfig(inputs=[str(p) for p in inputs], out=str(tmp_path / "runs"), name=name, **kw)
    summary = run_merge(cfg)
    return Path(summary["final"]), summary


def _logits(spec: str) -> torch.Tensor:
    with torch.no_grad():
        return load_model(spec).eval()(IDS).logits


def _deltas(spec: str, base: Path) -> dict[str, torch.Tensor]:
    """Merged-in weight minus base weight, per Linear weight (PEFT's merge_and_unload as the oracle)."""
    merged = load_model(spec).merge_and_unload().state_dict()
    plain = load_model(str(base)).state_dict()
    return {k: merged[k] - plain[k] for k in plain if k.endswith("proj.weight")}


def test_linear_weights_one_zero_give_adapter_a(tmp_path, tracks):
    final, summary = _merge(tmp_path, [tracks["a"], tracks["b"]], "lin10", weights=[1.0, 0.0], method="linear")
    assert summary["tokenizer_check"]["text_probes"] >= 5
    torch.testing.assert_close(_logits(str(final)), _logits(str(tracks["a"])), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_logits(str(final)), _logits(str(tracks["base"])), atol=1e-3)


def test_cat_half_half_is_the_average_of_the_merged_deltas(tmp_path, tracks):
    """`cat` stacks the factors: B'A' = sum w_i s_i B_i A_i, i.e. exactly the weighted sum of deltas."""
    final, _ = _merge(tmp_path, [tracks["a"], tracks["b"]], "cat", weights=[0.5, 0.5], method="cat")
    got = _deltas(str(final), tracks["base"])
    da, db = _deltas(str(tracks["a"]), tracks["base"]), _deltas(str(tracks["b"]), tracks["base"])
    assert got.keys() == da.keys() and len(got) == 14  # 7 projections x 2 layers
    for k in got:
        torch.testing.assert_close(got[k], 0.5 * da[k] + 0.5 * db[k], rtol=1e-4, atol=1e-6)


def test_linear_half_half_mixes_the_factors_with_cross_terms(tmp_path, tracks):
    """PEFT's `linear` sums sqrt(w s)-weighted A's and B's: delta = (sum c_i B_i)(sum c_i A_i),
    c_i = sqrt(w_i s_i), computed here from the saved factors; it is not the average of deltas."""
    final, _ = _merge(tmp_path, [tracks["a"], tracks["b"]], "lin55", weights=[0.5, 0.5], method="linear")
    merged_cfg = json.loads((final / "adapter_config.json").read_text())
    assert merged_cfg["r"] == 4 and merged_cfg["lora_alpha"] == 4  # PEFT's merged adapter: scale 1
    fa, fb = (load_file(str(tracks[t] / "adapter_model.safetensors")) for t in "ab")
    scale = 8 / 4  # alpha / r of each input
    c = (0.5 * scale) ** 0.5
    got = _deltas(str(final), tracks["base"])
    da, db = _deltas(str(tracks["a"]), tracks["base"]), _deltas(str(tracks["b"]), tracks["base"])
    far_from_average = 0
    for k, delta in got.items():
        key = "base_model.model." + k.removesuffix(".weight")
        a_sum = c * fa[f"{key}.lora_A.weight"] + c * fb[f"{key}.lora_A.weight"]
        b_sum = c * fa[f"{key}.lora_B.weight"] + c * fb[f"{key}.lora_B.weight"]
        torch.testing.assert_close(delta, b_sum @ a_sum, rtol=1e-4, atol=1e-6)
        far_from_average += not torch.allclose(delta, 0.5 * da[k] + 0.5 * db[k], atol=1e-4)
    assert far_from_average == len(got)


@pytest.mark.parametrize("method", ["ties", "dare_ties", "dare_linear"])
def test_ties_and_dare_give_a_loadable_adapter(tmp_path, tracks, method):
    final, summary = _merge(
        tmp_path, [tracks["a"], tracks["b"]], method, weights=[1.0, 1.0], method=method, density=0.5
    )
    assert summary["method"] == method and (final / "adapter_model.safetensors").is_file()
    logits = _logits(str(final))
    assert torch.isfinite(logits).all()
    assert not torch.allclose(logits, _logits(str(tracks["base"])), atol=1e-4)
    factors = load_file(str(final / "adapter_model.safetensors"))
    zero_share = sum((t == 0).sum().item() for t in factors.values()) / sum(t.numel() for t in factors.values())
    assert 0.2 < zero_share < 0.8  # density 0.5 pruned about half of each factor


def test_merged_model_option_writes_a_standalone_model(tmp_path, tracks):
    final, summary = _merge(
        tmp_path, [tracks["a"], tracks["b"]], "cat-full", weights=[0.5, 0.5], method="cat", merged_model=True
    )
    standalone = Path(summary["run_dir"]) / "merged_model"
    assert (standalone / "config.json").is_file() and not (standalone / "adapter_config.json").exists()
    torch.testing.assert_close(_logits(str(standalone)), _logits(str(final)), rtol=1e-4, atol=1e-5)


def test_mergekit_linear_of_full_models_is_the_weighted_average(tmp_path, smol_tokenizer):
    m1 = _save_base(tmp_path / "m1", smol_tokenizer, seed=3)
    m2 = _save_base(tmp_path / "m2", smol_tokenizer, seed=4)
    final, summary = _merge(tmp_path, [m1, m2], "mk", weights=[0.3, 0.7], method="linear")
    assert summary["kind"] == "model"
    got = load_model(str(final)).state_dict()
    s1, s2 = load_model(str(m1)).state_dict(), load_model(str(m2)).state_dict()
    assert got.keys() == s1.keys()
    for k in got:
        torch.testing.assert_close(got[k], 0.3 * s1[k] + 0.7 * s2[k], rtol=1e-5, atol=1e-6)


def test_mergekit_ties_needs_a_base(tmp_path, smol_tokenizer):
    m1 = _save_base(tmp_path / "m1", smol_tokenizer, seed=3)
    with pytest.raises(MergeError, match="set base"):
        _merge(tmp_path, [m1, m1], "mk-ties", method="ties")


def test_merge_records_inputs_and_lineage(tmp_path, tracks):
    """An input that is a run's output links the merge to that run: lineage follows merges."""
    runs = tmp_path / "runs"
    runs.mkdir()
    with Registry(runs / "registry.sqlite") as reg:
        trained = reg.start("track-a", "sft", {}, [], str(tracks["base"]))
        adapter = tmp_path / "a-run"
        import shutil

        shutil.copytree(tracks["a"], adapter)
        reg.record_output(trained, "final", adapter)
        reg.finish(trained, {}, {})
    final, summary = _merge(tmp_path, [adapter, tracks["b"]], "lineage", weights=[1.0, 1.0], method="cat")
    assert read_marker(final)["run_id"] == summary["run_id"]
    with Registry(runs / "registry.sqlite") as reg:
        inputs = reg.inputs(summary["run_id"])
        # the two adapters and their shared base, each the starting weights of the merge
        assert [(i.path, i.role) for i in inputs] == [
            (str(adapter), "base_model"),
            (str(tracks["b"]), "base_model"),
            (str(tracks["base"]), "base_model"),
        ]
        assert inputs[0].parent_run == trained
        assert {row.run_name for row in reg.lineage(summary["run_id"])} == {"lineage", "track-a"}
        assert reg.get(summary["run_id"])["kind"] == "merge"


def _one_line_error(res):
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    return " ".join(res.output.split())


def test_adapters_over_different_bases_are_a_one_line_error(tmp_path, tracks, smol_tokenizer):
    other = _save_base(tmp_path / "other-base", smol_tokenizer, seed=5)
    c = _save_adapter(tmp_path / "c", other, smol_tokenizer, seed=6)
    cfg = tmp_path / "merge.yaml"
    cfg.write_text(yaml.safe_dump({"inputs": [str(tracks["a"]), str(c)], "out": str(tmp_path / "runs")}))
    line = _one_line_error(CliRunner().invoke(app, ["merge", str(cfg)]))
    assert "different bases" in line and str(c) in line and str(other) in line
    assert not (tmp_path / "runs").exists()  # refused before anything was recorded


def test_config_errors_are_one_line(tmp_path, tracks):
    cfg = tmp_path / "merge.yaml"
    cfg.write_text(yaml.safe_dump({"inputs": [str(tracks["a"]), str(tracks["b"])], "weights": [1.0]}))
    line = _one_line_error(CliRunner().invoke(app, ["merge", str(cfg)]))
    assert "weights has 1 values for 2 inputs" in line
    cfg.write_text(
        yaml.safe_dump(
            {"inputs": [str(tracks["a"]), str(tracks["b"])], "method": "task_arithmetic", "out": str(tmp_path / "runs")}
        )
    )
    line = _one_line_error(CliRunner().invoke(app, ["merge", str(cfg)]))
    assert "not a PEFT combination type" in line


def test_a_broken_tokenizer_fails_the_merge_in_one_line(tmp_path, tracks):
    broken = tmp_path / "a-broken"
    import shutil

    shutil.copytree(tracks["a"], broken)
    template = broken / "chat_template.jinja"
    if template.is_file():  # the tokenizer saved its template beside its config
        template.write_text(template.read_text().replace("<|im_start|>", "<|im_start|> "))
    else:
        cfg = json.loads((broken / "tokenizer_config.json").read_text())
        cfg["chat_template"] = cfg["chat_template"].replace("<|im_start|>", "<|im_start|> ")
        (broken / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(MergeError, match="round trip failed") as info:
        tokenizer_roundtrip(broken, str(tracks["base"]))
    assert "\n" not in str(info.value)
    cfg = tmp_path / "merge.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "inputs": [str(broken), str(tracks["b"])],
                "method": "cat",
                "out": str(tmp_path / "runs"),
                "name": "bad-tok",
            }
        )
    )
    line = _one_line_error(CliRunner().invoke(app, ["merge", str(cfg)]))
    assert "tokenizer round trip failed" in line and "tool-call chat" in line
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        assert reg.latest("bad-tok")["status"] == "failed"
