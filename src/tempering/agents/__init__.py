"""Agent training: multi-turn tool environments in the sandbox (see docs/agents.md).

    tasks.py     `AgentTask` rows (JSONL + fixtures): prompt, tools, files, goal, tier, split
    suites.py    `load_agent_suite`: what a suite name means (built-in, task JSONL, Harbor folders)
    tools.py     the tools (JSON schemas + what runs them; sandboxed where they touch files)
    goals.py     goal checks on the final state
    env.py       `Environment` protocol (`reset`/`step`) and `ToolEnv`, its one implementation
    policies.py  scripted policies (oracle, noop, random, recover) that validate the harness
    episode.py   text-level episodes and the agent metrics
    envs/        the built-in suites: tool_arith, tool_notation, retry, workspace, safe, repo
    harbor.py    Harbor task folders (`harbor:DIR`) as tasks; harbor_dockerfile.py their workspace,
                 harbor_judge.py (+ harbor_runner.py, in the sandbox) their test.sh and reward

Layer: above `rollout` (it drives an `Engine`), below `pipeline`, `evals` and `recipes`.
"""
