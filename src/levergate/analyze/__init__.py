"""`levergate analyze`: replay your own traffic through candidate settings and see what each lever
would save, and cost in latency, before switching it on (the CLI is cli/analyze.py).

    inputs.py    the request log, an OpenAI request file or a bench trace, as `Req` values
    fit.py       the latency model, fitted to the logged timings
    plan.py      what a configuration does to each lever; which levers a candidate changes
    replay.py    the fast path: fingerprint-only levers in virtual time, priced by the catalog
    provider_cache.py  the providers' prompt caches the replay runs (bounded; OpenAI's routing
                 by prefix and prompt_cache_key, Anthropic's breakpoints by the gateway's placer)
    analysis.py  both sides, each lever alone, what was not evaluable, recommendations
    render.py    the terminal table (the HTML page is report/analysis.py)

What the log keeps for this, and which lever needs what: requestlog/features.py.
"""
