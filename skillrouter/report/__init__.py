"""Collect grids into tidy data and regenerate the paper tables and figure: python -m skillrouter.report."""
