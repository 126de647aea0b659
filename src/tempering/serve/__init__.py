"""Serving: an OpenAI-compatible server over releases, API keys and audit, feedback, blind arena.

    backend   model names -> releases (production, candidate canary, vN) -> engines (`engine_for`)
    protocol  OpenAI request bodies and error shape
    chat      requests -> engine input; completions -> responses and stream chunks
    store     SQLite: hashed keys, append-only audit log, feedback, arena battles and votes
    app       the FastAPI app (`create_app`)
    gate      in front of every route: route template, body cap, key check before the body is read
    arena     the blind arena routes, its page, votes -> pairs; ranking: Bradley–Terry + bootstrap
    exports   feedback rows for the pipeline's `feedback` stage

See docs/serve.md.
"""
