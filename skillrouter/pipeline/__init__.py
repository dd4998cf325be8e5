"""Stages, the stage cache, cell runs and grid status."""
