"""Task sources: turn outside benchmarks and generators into `Task`s (hidden material in the verifier spec)."""
