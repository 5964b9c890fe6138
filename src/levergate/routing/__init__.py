"""The learned router: labels in, a router file out, a score per prompt on the request path.

    labels.py    labelled rows (prompt, cheap correct, strong correct) from CSV or JSONL
    features.py  what the router sees: the MiniLM embedding plus length/structure features
    model.py     the router file (JSON, versioned, no pickle) and its numpy scorer
    curve.py     the cost-quality curve and the threshold for a target quality (pure numpy)
    train.py     fitting with scikit-learn (offline only; serving needs numpy alone)

The request path is `layers/route.py`, which loads a file with `model.load`; the commands are
`levergate router train|eval` (`cli/router.py`); the evaluation is benchmarks/routing.py.
"""
