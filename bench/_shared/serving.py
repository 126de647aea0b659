"""What the serving benches share: the chat prompts they send and a free loopback port."""

import socket

PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about autumn.",
    "What is the capital of France, and why is it famous?",
    "Give three tips for learning to code.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
