"""skillrouter: declarative experiment grids for skill-routing research."""
__version__ = "0.1.0"
