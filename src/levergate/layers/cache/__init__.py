"""cache levers."""
