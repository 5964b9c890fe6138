"""The live dashboard at `/dashboard`: request rate, latency percentiles, errors, cache hit
rates, spend and savings by lever over a range from 5 minutes to 7 days (from the request log),
quality retention, endpoint health, ejections, queue depth and quota headroom (from the
gateway's own metrics), a request table that opens one request's record, and a keys page over
the admin API (a feature: dashboard/extension.py; settings: config/dashboard.py).

    access.py     who is looking: the admin token, a key with the `dashboard` role, or open
    data.py       ranges, buckets, percentiles and hit rates from the log's queries (pure)
    metrics.py    the registry's families the page shows, as rows
    http.py       the pages, their static files and the JSON routes
    extension.py  the feature

The pages and scripts are in levergate/assets/dashboard/ (plain HTML and JavaScript, uPlot
vendored from npm with its licence: no build step).
"""
