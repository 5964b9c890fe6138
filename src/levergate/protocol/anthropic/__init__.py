"""Anthropic Messages, both sides: a client speaking it at the edge (`edge_*`), an upstream
speaking it under the pipeline (`upstream_*`), and what both share."""
