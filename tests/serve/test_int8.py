"""`temper serve --quantize int8`: the served model is a weight-only int8 copy that answers as the float one."""

from __future__ import annotations

import math

from tests.serve.conftest import LOGIT, TEXT_ANSWER, ServerThread


def test_int8_deployment_serves_the_same_answer_with_the_same_logprobs(tiny_models, tmp_path):
    import openai

    from tempering.models.quantize import Int8WeightLinear
    from tempering.serve.app import create_app
    from tempering.serve.config import ServeConfig

    app = create_app(ServeConfig(state=tmp_path / "state", model=str(tiny_models[1]), quantize="int8"))
    _, secret = app.state.store.create_key("int8")
    server = ServerThread(app)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=str(tiny_models[1]),
            messages=[{"role": "user", "content": "2+2?"}],
            temperature=0,
            max_tokens=16,
            logprobs=True,
        )
        served = next(iter(app.state.models._loaded.values()))
    finally:
        server.stop()
    # the chain model's head holds one value (LOGIT) per row: per-row int8 scales store it exactly
    assert any(isinstance(m, Int8WeightLinear) for m in served.engine.model.modules())
    assert reply.choices[0].message.content == TEXT_ANSWER
    v = len(served.tokenizer)
    step = -math.log(1 + (v - 1) * math.exp(-LOGIT))
    assert all(abs(t.logprob - step) < 0.01 for t in reply.choices[0].logprobs.content)


def test_serve_refuses_an_unknown_quantization(tmp_path):
    from typer.testing import CliRunner

    from tempering.cli import app

    result = CliRunner().invoke(app, ["serve", "--state", str(tmp_path), "--quantize", "int4"])
    assert result.exit_code != 0 and "--quantize 'int4' is not one of none, int8" in result.output
