"""The grid sweeper (``hydra/sweeper=skillrouter_basic``, the default): Hydra's basic sweeper without its up-front
validation. The grid launchers compose every cell themselves before anything runs (a bad override stops the grid
there, in Hydra's own words), so validating composed each cell a second time: half of a large grid's planning."""
from __future__ import annotations

from typing import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class GridSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """The launcher's composition of each cell is the validation (see the module docstring)."""
