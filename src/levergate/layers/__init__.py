"""One lever, one layer, one module. The order they stack in is written in `pipeline.py`."""
