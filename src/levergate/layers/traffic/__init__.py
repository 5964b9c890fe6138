"""traffic levers."""
