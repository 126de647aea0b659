"""Registry migrations. v1 stored inputs as `{path: sha}` with no role and found a
checkpoint's run by walking up to `registry.sqlite`; v2 has roles, parent runs and marker
files. The v1 recipes' config layouts are read here once, so nothing else needs to know them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def _v1_roles(kind: str, config: dict[str, Any]) -> dict[str, str]:
    """path -> role for a v1 run, from the config layout its recipe had then."""
    roles: dict[str, str] = {}
    if kind == "sft":
        data = config.get("data") or {}
        roles.update({p: "eval" for p in data.get("eval") or []})
        roles.update({p: "replay" for p in (data.get("replay") or {}).get("data") or []})
        roles.update({p: "train" for p in data.get("train") or []})
    elif kind == "grpo":
        held = ((config.get("heldout") or {}).get("tasks") or {}).get("source")
        if held:
            roles[held] = "heldout"
        roles[(config.get("tasks") or {}).get("source")] = "tasks"
    return roles


def _local(path: str, root: Path) -> Path | None:
    p = Path(path)
    for c in ([p] if p.is_absolute() else [Path.cwd() / p, root.parent / p, root / p]):
        if c.exists():
            return c.resolve()
    return None


def v1_to_v2(db: sqlite3.Connection, registry_path: Path) -> None:
    """Fill run_inputs / run_outputs from v1 rows and mark the finished runs' final dirs."""
    root = registry_path.parent.resolve()
    runs = [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY started_at").fetchall()]
    by_dir: dict[Path, str] = {}  # run dir -> newest run id under that name
    for run in runs:
        by_dir[root / run["name"]] = run["id"]
    for run in runs:
        config, recorded = json.loads(run["config"]), json.loads(run["inputs"])
        roles = _v1_roles(run["kind"], config)
        rows = [(run["id"], roles.get(path, "train"), path, sha, None) for path, sha in recorded.items()]
        if run["base_model"]:
            local = _local(run["base_model"], root)
            parent = next((rid for d, rid in by_dir.items() if local and (local == d or d in local.parents)), None)
            rows.append((run["id"], "base_model", run["base_model"], None, parent))
        db.executemany("INSERT INTO run_inputs VALUES (?, ?, ?, ?, ?)", rows)
        final = (json.loads(run["outputs"]) or {}).get("final")
        local_final = _local(final, root) if final and run["status"] == "finished" else None
        if local_final and local_final.is_dir():
            db.execute("INSERT INTO run_outputs VALUES (?, 'final', ?)", (run["id"], str(local_final)))
            marker = {"registry": str(registry_path.resolve()), "run_id": run["id"], "run": run["name"],
                      "role": "final"}
            # the name is registry.MARKER (not imported: registry imports this module)
            (local_final / "tempering-run.json").write_text(json.dumps(marker, indent=1) + "\n")
