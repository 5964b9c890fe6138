"""The wire formats levergate speaks, one subpackage per protocol: `openai` (chat and
embeddings bodies checked cheaply, prompt tokens counted), `anthropic` (Messages: `edge_*` for
a client speaking it, `upstream_*` for an upstream speaking it, what both share) and
`responses` (the Responses API to and from chat completions); `sse` and `tokens` serve all.

Where a protocol is translated follows from one question: does any lever need to see the call
in that protocol? The pipeline's own shape is OpenAI chat (and embeddings). A protocol that is
only another spelling of a chat call is translated at the edge, in its handler, before
`make_call` and after `Gateway.serve`: Anthropic Messages from a client
(`server/handlers/anthropic.py`), so every layer sees an ordinary chat call and nothing below
knows the client spoke Anthropic; an Anthropic *upstream* is the same rule at the other end,
translated in its endpoint (`upstreams/anthropic.py`) under every layer. A protocol with state
or choices of its own is translated in a layer: the Responses API may go to an upstream
natively or as chat (the alias decides), and its turns are stored per tenant, so
`layers/responses.py` sits under Authenticate (the tenant known) and above the caches and
per-model layers (which then see the call that will really be sent). A new protocol goes in a
handler unless a layer must read it.
"""
