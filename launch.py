"""Compose the Hydra config and hand it to skillrouter. Usage: python launch.py [-m] group=option ..."""
import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def launch(cfg: DictConfig):
    from skillrouter.pipeline.entry import main

    return main(cfg)


if __name__ == "__main__":
    launch()
