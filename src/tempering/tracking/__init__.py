"""One run's event stream: `metrics.jsonl` (the one writer, `events.py`), the experiment trackers
that mirror it (`trackers.py`), and the `RunContext` every writer goes through (`context.py`).

Below `train` and `evals`, so the Trainer, the held-out monitor, the recipes, evals and serving
use the same trackers without reaching into one another.
"""
