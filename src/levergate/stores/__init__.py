"""State behind small seams: key-value stores (memory, SQLite, Redis) and vector indexes.

Every store has an in-memory implementation the tests use and real ones; the pipeline builds
them from settings (`stores.build`)."""
