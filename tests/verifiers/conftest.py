"""One verifier context (one 4-slot sandbox) for the whole verifier test session."""

import pytest

from tempering.verifiers import VerifierContext


@pytest.fixture(scope="session")
def ctx():
    with VerifierContext(sandbox_size=4) as context:
        yield context
