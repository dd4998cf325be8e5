"""Where and when stages run: building one stage (journaled), the local executor, SLURM stage dispatch."""
