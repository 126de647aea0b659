"""A bounded verifier worker's main loop (`python -m tempering.verifiers.bounded_worker`).

Started and spoken to by `tempering.verifiers.bounded.BoundedWorkers`: one JSON request per
line on stdin, one JSON reply per line on stdout; a `{"ready": true}` line once imported.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tempering.verifiers.base import VERIFIERS


def serve() -> None:
    """The worker's loop: read a request line, score with the registered function, write a reply line."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a library's print must not corrupt the protocol
    out.write(json.dumps({"ready": True}).encode() + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            reward = VERIFIERS[request["type"]](request["spec"], request["completion"], None)  # type: ignore[arg-type]
            reply: dict[str, Any] = {"reward": reward.model_dump()}
        except Exception as exc:  # relayed to the caller, which re-raises it there
            name = type(exc).__name__
            reply = {"error_type": name, "error": exc.args[0] if name == "KeyError" and exc.args else str(exc)}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    serve()
