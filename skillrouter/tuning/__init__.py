"""Hyperparameter search with Hydra's Optuna sweeper (``hydra/sweeper=optuna``) over our grid: a study's trials are
cells that our launchers plan, dedupe and dispatch, scored on a dev split (:mod:`.study`, :mod:`.callbacks`)."""
