"""The OpenAI wire: request checks, usage accounting, server-sent events."""
