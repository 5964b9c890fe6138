"""The cascade lever: a cheap model first, a stronger one when its answer fails a check."""
