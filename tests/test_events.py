"""What happened, as plain data, to whoever watches (``skillrouter.events``): an observer's failure costs one warning
line and never the work; a stage's reports go to the observers of the stage being built, and nowhere outside one; a
child process's reports reach the parent's observers through a queue."""
from __future__ import annotations

import logging
import queue

from skillrouter import events

REF = events.StageRef("train_encoder", "0123456789abcdef")


class Recorder:
    def __init__(self):
        self.seen = []

    def notify(self, event):
        self.seen.append(event)


class Broken:
    def notify(self, event):
        raise RuntimeError("the observer broke")


def test_an_observer_that_fails_costs_one_warning_and_the_others_are_told(caplog):
    recorder = Recorder()
    with caplog.at_level(logging.WARNING):
        events.publish([Broken(), recorder], events.CellEnded("run"))
    assert recorder.seen == [events.CellEnded("run")]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("observer Broken failed on CellEnded (RuntimeError: the observer broke)")


def test_a_stages_reports_go_to_the_observers_of_the_stage_being_built():
    recorder = Recorder()
    events.log_step({"train/loss": 1.0}, 1)  # outside a build: nowhere
    with events.building([recorder], REF):
        events.log_step({"train/loss": 0.5}, 2)
        events.log_summary({"negatives/semantic": 4})
        events.log_table("t", ["a"], [[1]])
    assert recorder.seen == [events.StageStep(REF, {"train/loss": 0.5}, 2), events.StageSummary(REF, {"negatives/semantic": 4}),
                             events.StageTable(REF, "t", ["a"], [[1]])]
    assert not events.reporting()


def test_a_child_processs_reports_reach_the_parents_observers_as_its_stage():
    recorder, channel = Recorder(), queue.Queue()
    with events.forwarding(channel):  # what a data-parallel rank 0 does in its own process
        events.log_step({"train/loss": 0.25}, 3)
    with events.building([recorder], REF):
        events.drain(channel)
    assert recorder.seen == [events.StageStep(REF, {"train/loss": 0.25}, 3)]


def test_observers_come_from_the_config():
    from omegaconf import OmegaConf

    assert events.observers_of(OmegaConf.create({"tracking": {"name": "none", "observer": None}}), "g") == []
    cfg = OmegaConf.create({"tracking": {"observer": {"_target_": "skillrouter.tracking.observer.WandbObserver",
                                                      "project": "p", "entity": None, "mode": "disabled"}}})
    (observer,) = events.observers_of(cfg, "sweep")
    assert observer.settings.group == "sweep" and observer.settings.mode == "disabled"
    import pickle

    assert pickle.loads(pickle.dumps(observer)).settings == observer.settings  # it travels to a SLURM stage job
