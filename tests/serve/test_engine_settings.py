"""`temper serve`'s engine: `ServeConfig.engine` (or `--set engine.*`) reaches every served model."""

from __future__ import annotations

from typer.testing import CliRunner


def test_served_models_decode_with_the_configured_slots(tiny_models):
    from tempering.config import EngineSettings
    from tempering.rollout.batching_engine import BatchingEngine
    from tempering.serve.backend import MAX_LEN, engine_for

    served = engine_for(str(tiny_models[1]), "fp32", "none", EngineSettings(max_slots=5))
    try:
        assert type(served.engine) is BatchingEngine and served.engine.max_slots == 5
        assert served.engine.max_len == served.max_context <= MAX_LEN
    finally:
        served.engine.stop()
    default = engine_for(str(tiny_models[1]), "fp32")
    try:
        assert default.engine.max_slots == 32  # SLOTS, as before `engine:`
    finally:
        default.engine.stop()


def test_the_serve_report_gives_kv_cache_bytes_per_token_by_hand(tiny_models):
    """The chain model: 1 layer, 1 KV head of head_dim = hidden size, fp32: 1 x 2 x 1 x h x 4 bytes."""
    from tempering.serve.backend import engine_for, engine_report

    served = engine_for(str(tiny_models[1]), "fp32")
    try:
        per_token = 1 * 2 * 1 * served.engine.model.config.hidden_size * 4
        assert served.engine.kv_bytes_per_token == per_token
        assert engine_report(served) == (
            f"engine BatchingEngine (fp32), context 512 tokens, 32 slots, KV cache {per_token:,} bytes/token "
            f"({per_token * 512 / 2**20:.1f} MiB per full-context sequence; "
            f"at most 16,384 positions: {per_token * 16384 / 2**20:.1f} MiB)"
        )
    finally:
        served.engine.stop()


def test_serve_refuses_an_engine_that_cannot_serve_in_one_line(tmp_path):
    from tempering.cli import app

    res = CliRunner().invoke(app, ["serve", "--state", str(tmp_path / "s"), "--set", "engine.kind=hf"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "engine.kind 'hf' cannot serve" in res.stderr
    assert not (tmp_path / "s").exists()


def test_serve_set_of_a_flagged_key_is_refused(tmp_path):
    from tempering.cli import app

    res = CliRunner().invoke(app, ["serve", "--state", str(tmp_path / "s"), "--set", "precision=bf16"])
    assert res.exit_code == 2 and "precision is set by a flag of this command" in res.stderr
