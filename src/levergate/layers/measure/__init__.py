"""measure levers."""
