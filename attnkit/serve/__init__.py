"""The check service (`attnkit serve`): students check a notebook from Jupyter against the hidden checks, a few
times an hour, judged exactly as the grade will be. app.py (the tornado application), tokens.py (who may ask),
limits.py (how often, and the record), answer.py (what a check shows), store.py (where all that is kept),
attnkit_check.py (the notebook's client, shipped beside the notebook)."""
