"""Experiment tracking with W&B (``tracking=wandb``, offline unless ``WANDB_MODE`` says otherwise) or none.

An observer: :class:`.observer.WandbObserver` is told what happened (:mod:`skillrouter.events`, published by the
pipeline, the stages' code and the tuning layer) and imports none of those rooms (an import contract in
``pyproject.toml``). What a grid leaves in W&B, and which module puts it there:

* :mod:`.stage_runs` — a run per built stage (``job_type`` = the stage kind; training curves and synthesis
  counters come from the stage's reports), and the stage as an artifact referencing its cache entry;
* :mod:`.cell_runs` — a run per cell: the grid's choices as top-level config keys, every metric in the
  summary, per-query and rendered-text Tables, the R@K curve, and the artifacts of the stages it used;
* :mod:`.grid_run` — one run per grid, a Table with a row per cell, logged by the launcher when the grid ends;
* :mod:`.sync` — ``python -m skillrouter.tracking sync SWEEP``: uploads a grid's offline runs and links
  the lineage W&B refuses to record offline; :mod:`.workspace` — a saved view of a grid.

W&B failing never fails a stage or a cell (:func:`.settings.guarded`: one warning line), and no secret
reaches a logged config, table or artifact (:mod:`.secrets`).
"""
