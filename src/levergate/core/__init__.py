"""The core values: a request is a `Call`, an answer is a `Reply`, a lever is a `Layer`."""
