"""Data-parallel training: two gloo processes on this CPU make the loss curve and train the weights that one
process does on the same global batch (the outputs of both shares gathered, so every rank's positives are the
other's in-batch negatives), and a two-process training killed after a checkpoint resumes to the result of an
uninterrupted one."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from skillrouter.models import build_tiny_qwen3
from skillrouter.rerank.scorers import PairScorer
from skillrouter.rerank.spec import RerankerSpec
from skillrouter.retrieval.dense import EncoderSpec, load_encoder
from skillrouter import events
from skillrouter.train import data_parallel
from skillrouter.train.config import EncoderLoss, TrainConfig
from skillrouter.train.encoder import train_encoder_run
from skillrouter.data.pairs import TrainExample
from skillrouter.train.reranker import build_lists, train_reranker_run

pytestmark = pytest.mark.usefixtures("cpu_only")  # identities of the training math: one device on both sides

TEXTS = dict(zip("abcdefgh", ["csv cleaner | drop duplicate rows", "image resizer | thumbnails", "audio cutter | trim silence",
                              "pdf reader | extract text", "sql tuner | add an index", "log parser | group lines",
                              "notes | keep notes", "mailer | send the weekly email"]))
EXAMPLES = [TrainExample(q, p) for q, p in [("remove duplicate rows", ("a",)), ("make thumbnails and trim audio", ("b", "c")),
                                            ("read the pdf", ("d",)), ("tune the slow query", ("e",)), ("group log lines", ("f",))]]
NEGATIVES = [["g", "h"], ["g", "e"], ["h", "g"], ["f", "g"], ["h", "a"]]


def _weights(path) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in load_encoder(EncoderSpec(model=str(path), pooling="lasttoken")).named_parameters()}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen")
    return {"base": build_tiny_qwen3(root / "base"), "causal_lm": build_tiny_qwen3(root / "lm", head="causal_lm")}


class Steps:
    """An observer: the steps a training reports, by step."""

    def __init__(self):
        self.steps: dict[int, dict] = {}

    def notify(self, event):
        if isinstance(event, events.StageStep):
            self.steps[event.step] = dict(event.values)


def test_two_gloo_processes_train_the_single_process_encoder(tmp_path, qwen):
    spec = EncoderSpec(model=qwen["base"], pooling="lasttoken", max_seq_length=32)
    cfg = TrainConfig(epochs=2, batch_size=4, lr=1e-3, checkpoint_every=100)
    loss = EncoderLoss("multi_infonce", 1 / 30, 0.25)
    args = (spec, EXAMPLES, NEGATIVES, TEXTS, loss, cfg)
    one_steps, two_steps = Steps(), Steps()
    with events.building([one_steps], events.StageRef("train_encoder", "one")):
        single = train_encoder_run(*args, tmp_path / "w1", tmp_path / "one").losses
    with events.building([two_steps], events.StageRef("train_encoder", "two")):  # rank 0 reports from its own process, through the parent's queue
        double = data_parallel.run(train_encoder_run, (*args, tmp_path / "w2", tmp_path / "two"), 2).losses
    assert double == pytest.approx(single, abs=1e-5) and len(single) == 4
    assert sorted(two_steps.steps) == sorted(one_steps.steps) == [1, 2, 3, 4]
    for step, figures in one_steps.steps.items():  # R3's two loss terms too
        for key in ("train/loss", "train/loss_main", "train/loss_sibling", "train/lr"):
            assert two_steps.steps[step][key] == pytest.approx(figures[key], abs=1e-5), (step, key)
    one, two, untrained = _weights(tmp_path / "one"), _weights(tmp_path / "two"), _weights(qwen["base"])
    for name, w in one.items():
        torch.testing.assert_close(two[name], w, rtol=1e-4, atol=1e-5, msg=name)
    assert any(not torch.equal(w, untrained[name]) for name, w in one.items())


def test_two_gloo_processes_train_the_single_process_reranker(tmp_path, qwen):
    spec = RerankerSpec(model=qwen["causal_lm"], head="causal_lm", max_length=48)
    loss = {"name": "pointwise"}
    lists = build_lists(EXAMPLES, [[*ex.positives, *negs, "a", "b"] for ex, negs in zip(EXAMPLES, NEGATIVES)], loss, 4)
    cfg = TrainConfig(epochs=1, batch_size=3, lr=1e-3, checkpoint_every=100, mini_batch=2)
    args = (spec, lists, TEXTS, loss, cfg)
    single = train_reranker_run(*args, tmp_path / "w1", tmp_path / "one").losses
    double = data_parallel.run(train_reranker_run, (*args, tmp_path / "w2", tmp_path / "two"), 2).losses
    assert double == pytest.approx(single, abs=1e-5)
    one = dict(PairScorer(RerankerSpec(model=str(tmp_path / "one"), head="causal_lm")).named_parameters())
    two = dict(PairScorer(RerankerSpec(model=str(tmp_path / "two"), head="causal_lm")).named_parameters())
    for name, w in one.items():
        torch.testing.assert_close(two[name], w, rtol=1e-4, atol=1e-5, msg=name)


def test_shares_cover_a_batch_once():
    assert data_parallel.share(7) == slice(0, 7) and data_parallel.rank_world() == (0, 1)


def _train_then_die(*args):
    """In each process: train, every rank killed right after the second checkpoint (after its barrier)."""
    from skillrouter.train import loop

    real_save, saves = loop._save_checkpoint, []

    def save_then_die(*a, **k):
        real_save(*a, **k)
        saves.append(1)
        if len(saves) == 2:
            raise RuntimeError("killed")  # (torch's spawn wrapper swallows a KeyboardInterrupt as its own SIGINT)

    loop._save_checkpoint = save_then_die
    return train_encoder_run(*args)


def test_a_killed_two_process_training_resumes_to_the_uninterrupted_result(tmp_path, qwen):
    import torch.multiprocessing as mp

    spec = EncoderSpec(model=qwen["base"], pooling="lasttoken", max_seq_length=32)
    cfg = TrainConfig(epochs=3, batch_size=4, lr=1e-3, checkpoint_every=2)
    args = (spec, EXAMPLES, NEGATIVES, TEXTS, EncoderLoss("infonce", 0.05), cfg)
    full = data_parallel.run(train_encoder_run, (*args, tmp_path / "w1", tmp_path / "full"), 2).losses
    with pytest.raises(mp.ProcessRaisedException, match="killed"):
        data_parallel.run(_train_then_die, (*args, tmp_path / "w2", tmp_path / "resumed"), 2)
    from skillrouter.train.loop import latest_checkpoint

    assert latest_checkpoint(tmp_path / "w2").name == "step-4" and not (tmp_path / "resumed").exists()
    resumed = data_parallel.run(train_encoder_run, (*args, tmp_path / "w2", tmp_path / "resumed"), 2).losses
    assert resumed == pytest.approx(full, abs=1e-6) and len(full) == 6
    for name, w in _weights(tmp_path / "full").items():
        torch.testing.assert_close(_weights(tmp_path / "resumed")[name], w, rtol=1e-5, atol=1e-6, msg=name)


TASK_ENV = {"SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "1", "SLURM_JOB_ID": "7"}


def test_a_job_of_two_tasks_trains_the_single_process_encoder(tmp_path, qwen, monkeypatch):
    """The path of ``nodes`` / ``tasks_per_node``: task 0 (here) reaches the training inside ``leading`` and
    hands it over; task 1 (a second process, as SLURM starts it) follows; one gloo rank each. The weights equal
    one process's; the follower returns once told there is nothing more (a second follower of a job whose first
    task trained nothing returns at once)."""
    spec = EncoderSpec(model=qwen["base"], pooling="lasttoken", max_seq_length=32)
    args = (spec, EXAMPLES, NEGATIVES, TEXTS, EncoderLoss("infonce", 0.05), TrainConfig(epochs=2, batch_size=4, lr=1e-3))
    single = train_encoder_run(*args, tmp_path / "w1", tmp_path / "one").losses
    folder = data_parallel.handoff_folder(tmp_path)
    follow = [sys.executable, "-c", "import sys; from pathlib import Path; from skillrouter.train import data_parallel; "
              "print(data_parallel.follow(Path(sys.argv[1]), poll_s=0.1))", str(folder)]
    follower = subprocess.Popen(follow, env={**os.environ, **TASK_ENV, "SLURM_PROCID": "1", "SLURM_LOCALID": "1"},
                                stdout=subprocess.PIPE, text=True)
    for key, value in {**TASK_ENV, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}.items():
        monkeypatch.setenv(key, value)
    with data_parallel.leading(folder):
        assert data_parallel.JobTasks.current() == data_parallel.JobTasks(0, 2, 2, 1, 0)
        double = data_parallel.run(train_encoder_run, (*args, tmp_path / "w2", tmp_path / "two"), 1).losses
    assert follower.wait(timeout=120) == 0 and follower.stdout.read().strip() == "1"
    assert double == pytest.approx(single, abs=1e-5) and data_parallel.JobTasks.current().count == 1
    for name, w in _weights(tmp_path / "one").items():
        torch.testing.assert_close(_weights(tmp_path / "two")[name], w, rtol=1e-4, atol=1e-5, msg=name)
    idle = data_parallel.handoff_folder(tmp_path / "idle")
    with data_parallel.leading(idle):
        pass
    assert data_parallel.follow(idle) == 0
