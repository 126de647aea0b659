"""Fuzzing: schemathesis generates requests from the server's OpenAPI schema
(bodies that fit it and bodies that break it, every route) and finds no 500."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode

from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.config import ServeConfig

EXAMPLES = 8  # per route and mode


def test_fuzzed_requests_get_no_500(tiny_models, tmp_path):
    releases = Releases(Registry(tmp_path / "registry.sqlite"))
    for model, alias in zip(tiny_models, ("production", "candidate")):  # the arena pairs live releases
        releases.promote(model, gate={"passed": True, "rules": []}, alias=alias)
    app = create_app(
        ServeConfig(
            state=tmp_path / "state",
            registry=str(tmp_path / "registry.sqlite"),
            log_text=True,
            max_tokens=16,
            arena_max_tokens=8,
            rate_limit=100_000,
        )
    )
    _, secret = app.state.store.create_key("fuzzer")
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/feedback",
        "/arena/battles",
        "/arena/battles/{battle_id}/votes",
    }
    calls, negative_free = [], []
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(mode))
            @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def check(case):
                response = case.call_and_validate(
                    headers={"Authorization": f"Bearer {secret}"}, checks=[not_a_server_error]
                )
                calls.append(response.status_code)

            try:
                check()
            except Unsatisfiable:  # a route without parameters or body has no invalid request to make
                assert mode == GenerationMode.NEGATIVE
                negative_free.append(op.path)
    assert len(calls) > 5 * len(operations) and max(calls) < 500
    assert 200 in calls and 400 in calls  # both kinds of bodies reached the handlers
