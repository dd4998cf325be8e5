"""Compose the Hydra config and hand it to skillrouter. Usage: python launch.py [-m] group=option ..."""
import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def launch(cfg: DictConfig):
    from skillrouter.tuning.entry import main  # a cell, or an Optuna study's trial (tuning sits above the pipeline)

    return main(cfg)


if __name__ == "__main__":
    launch()
