"""The `levergate` command. Sync only here, at the edge: each subcommand runs one event loop."""
