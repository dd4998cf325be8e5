"""Skills, queries and the loaders that read every pool and benchmark format."""
from .dataset import load_dataset
from .loaders import load_descriptions
from .types import DataError, Dataset, LoadReport, Query, Skill

__all__ = ["DataError", "Dataset", "LoadReport", "Query", "Skill", "load_dataset", "load_descriptions"]
