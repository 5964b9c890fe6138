"""The request log: every finished request's record in SQLite or PostgreSQL, written off the
request path, bounded by age and size, read by `GET /admin/log`, `levergate log` and
`levergate report` (a feature: requestlog/extension.py; settings: config/request_log.py).

    row.py        the columns, and a `RequestRecord` as a row
    query.py      filters, cursors and their checks (pure)
    store.py      the table in SQLite or PostgreSQL: write, page, summary, series, groups, prune
    writer.py     the bounded queue and the background job that writes it in batches
    extension.py  the feature: the writer, a reader, the routes
    http.py       GET /admin/log, GET /admin/log/summary

Reading it from another feature (the dashboard): `log_of(host's extensions)` finds the
`RequestLog`; `await log.reader.run(lambda store: store.summary(LogFilter(since=...)))` runs any
of the store's queries (`page`, `after`, `summary`, `series`, `groups`, `latencies`) on the
reader's thread, and `parse_filter(query_params)` turns a request's parameters into a checked
`LogFilter` (a 400 naming a bad one), as `GET /admin/log` and `levergate log` do.
"""
