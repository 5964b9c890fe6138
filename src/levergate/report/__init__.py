"""`levergate report`: what a run of the gateway did and saved, as one offline HTML file and a
markdown summary (the CLI is cli/report.py).

    data.py  the numbers, from request-log records or a bench result (pure)
    svg.py   the charts, as inline SVG
    page.py  the HTML page and the markdown summary
"""
