"""The HTTP edges: the only place JSON becomes a `Call` and a `Reply` becomes JSON or SSE.

routes.py       the route table: (method, path pattern) -> handler, guard, body limit
edge.py         `Edge.handle`: match the route, guard it, hand over the body, run the handler
exchange.py     `Request`, `Response` (whole, streamed, or a file from disk), `BodySource`
route.py        one route line (`Route`) and `Routed`, what a feature that serves HTTP adds
params.py       the caller, query string and list limit of the routes that run no call
guards.py       who may call the routes that run no call (`/v1/models`, `/metrics`)
handlers/       one module per protocol: openai.py (chat, completions, embeddings, models),
                ops.py (health, readiness, metrics); features bring their own (batch/http.py)
asgi.py         the app: the ASGI adapter, and `App.serve` for the gateway's own protocol;
                transport.py: the in-process httpx transport
http_protocol.py, http_cycle.py, run.py   uvicorn's parser and connections, tuned, handing
                each request to `App.serve` without ASGI, on a real socket
"""
