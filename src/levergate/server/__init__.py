"""The HTTP edges: the only place JSON becomes a `Call` and a `Reply` becomes JSON or SSE."""
