"""Which tasks an agent suite name means: the one loader `temper agent` (`tasks.suites`), agent
eval suites (`agent:<suite>`) and pipeline digests go through.

    load_agent_suite("workspace")            # a built-in suite (`tasks.BUILTIN`)
    load_agent_suite("my/tasks.jsonl")       # a task JSONL (`tasks.load_agent_tasks`)
    load_agent_suite("harbor")               # the shipped Harbor tasks (`harbor.py`)
    load_agent_suite("harbor:path/to/dir")   # Harbor task folders
"""

from __future__ import annotations

from tempering.agents import harbor
from tempering.agents.tasks import BUILTIN, AgentTask, builtin_tasks, load_agent_tasks


def load_agent_suite(name: str) -> list[AgentTask]:
    """A built-in suite by name, Harbor task folders (`harbor`, `harbor:<dir>`), or a task JSONL path.

    Raises:
        UserError: an unknown file, a row or a task folder that does not load (one line naming it).
    """
    if harbor.is_harbor_suite(name):
        return harbor.load_harbor_suite(name)
    return builtin_tasks(name) if name in BUILTIN else load_agent_tasks(name)
