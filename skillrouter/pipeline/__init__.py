"""The grid: a cell's stage graph composed from its config, the grid's plan, where and when stages run
(in this process, or as SLURM jobs), a cell's run and scoring, the journal of stage outcomes, status."""
