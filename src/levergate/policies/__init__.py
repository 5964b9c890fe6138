"""Pure math behind the levers: no I/O, time and randomness passed in, property-tested."""
