"""Gateway keys: who may call, which models, at what rate, for how much money."""
