"""Offline work that loses nothing: the OpenAI-compatible Batch API (`/v1/files`, `/v1/batches`)
and its durable runner.

    model.py     files, jobs, lines; the status machine
    lines.py     input validation and result lines (pure)
    files.py     uploads streamed to disk (multipart), result files written atomically
    store.py     the JobStore seam; stores/ SQLite (one process) and PostgreSQL (replicas)
    runner.py    the background job that claims lines under leases and advances jobs
    execute.py   one line through the whole pipeline at priority `batch`
    service.py   the API operations the HTTP handlers call
"""
