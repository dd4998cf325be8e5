"""Field attention (issue 18, item 1): spans, shares and the summary, by hand and on a tiny random Qwen3."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from skillrouter.data.types import Skill
from skillrouter.fields import Caps, TextSpec
from skillrouter.models import build_tiny_qwen3
from skillrouter.report.attention import (FIELDS, PairAttention, analyse, field_shares, field_spans, layer_rows,
                                          rendered_fields, summarise, token_fields, write_attention)
from skillrouter.rerank.scorers import PairScorer
from skillrouter.rerank.spec import RerankerSpec

ROOT = Path(__file__).resolve().parents[1]
SKILL = Skill("a", "csv-cleaner", "  Clean CSV files quickly.  ", "Remove duplicate rows from csv files and fix their headers.")
FORMATS = [("qwen3", "joined"), ("qwen3", "release"), ("flat-full", "skillrouter"), ("struct", "skillrouter"),
           ("skillret", "release")]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen") / "lm", head="causal_lm", layers=3)


@pytest.mark.parametrize("prompt_format,style", FORMATS)
def test_field_tokens_cover_exactly_the_rendered_fields(lm, prompt_format, style):
    """Each field's span is its text in the rendered document, and its tokens run from the field's first
    non-blank character to its last (no truncation here); the rows are the ones the scorer feeds."""
    scorer = PairScorer(RerankerSpec(model=lm, head="causal_lm", max_length=256, prompt_format=prompt_format))
    text = TextSpec(mode="all", style=style, caps=Caps(500, 30), prompt_format=prompt_format)
    doc = text.skill(SKILL)
    pieces = rendered_fields(SKILL, text)
    spans = field_spans(doc, pieces)
    assert [doc[a:b] for a, b in spans] == list(pieces)
    if style != "release":
        assert pieces[2] == SKILL.body[:30].strip() if style == "joined" else SKILL.body[:30]
    rows, offsets = scorer.causal_rows(["dedupe my csv"], [doc], offsets=True)
    assert rows == scorer.causal_rows(["dedupe my csv"], [doc])[0]
    by_position = {p: (a, b) for p, a, b in offsets[0]}
    for (a, b), positions in zip(spans, token_fields(offsets[0], spans)):
        a, b = a + len(doc[a:b]) - len(doc[a:b].lstrip()), b - len(doc[a:b]) + len(doc[a:b].rstrip())
        assert positions and by_position[positions[0]][0] == a and by_position[positions[-1]][1] == b
        assert positions == list(range(positions[0], positions[-1] + 1))


def test_a_cut_document_counts_only_the_tokens_the_model_sees(lm):
    scorer = PairScorer(RerankerSpec(model=lm, head="causal_lm", max_length=128))
    text = TextSpec(mode="all", prompt_format="qwen3")
    long = Skill("b", "pdf-reader", "Read PDF files.", "extract text from pdf pages " * 40)
    rows, offsets = scorer.causal_rows(["read a pdf"], [text.skill(long)], offsets=True)
    assert len(rows[0]) == 128 and max(p for p, _, _ in offsets[0]) < 128
    [result] = analyse(scorer, text, [("q", "read a pdf", long)])
    assert result.tokens.sum() == len(offsets[0]) - 2 and result.tokens[2] < 40 * 5  # the two " | " are no field


def test_shares_sum_to_one_per_layer_on_a_tiny_qwen3(lm):
    scorer = PairScorer(RerankerSpec(model=lm, head="causal_lm", max_length=256))
    text = TextSpec(mode="all", prompt_format="qwen3")
    results = analyse(scorer, text, [("q1", "dedupe my csv", SKILL), ("q2", "fix headers", SKILL)])
    for r in results:
        assert r.shares.shape == (3, 3) and np.allclose(r.shares.sum(1), 1.0) and (r.shares > 0).all()
    nd = analyse(scorer, TextSpec(mode="nd", prompt_format="qwen3"), [("q1", "dedupe my csv", SKILL)])[0]
    assert nd.tokens[2] == 0 and np.allclose(nd.shares[:, 2], 0.0) and np.allclose(nd.shares.sum(1), 1.0)


def test_field_shares_and_summary_by_hand():
    attention = np.array([[0.5, 0.1, 0.2, 0.2], [0.0, 0.1, 0.1, 0.8]])  # 2 layers x 4 positions (0: the prompt)
    shares = field_shares(attention, [[1], [2], [3]])
    assert np.allclose(shares, [[0.2, 0.4, 0.4], [0.1, 0.1, 0.8]])
    results = [PairAttention("q1", "a", shares, np.array([1.0, 1.0, 2.0])),      # body token share 0.5 < 0.8
               PairAttention("q2", "b", np.array([[0.2, 0.2, 0.6], [0.3, 0.4, 0.3]]), np.array([1.0, 1.0, 8.0]))]  # 0.8 > 0.3
    summary = summarise(results)
    assert np.allclose(summary.mean[1], [0.2, 0.25, 0.55]) and np.allclose(summary.sd[1], [0.1, 0.15, 0.25])
    assert np.allclose(summary.token_share, [(0.25 + 0.1) / 2, (0.25 + 0.1) / 2, (0.5 + 0.8) / 2])
    assert summary.body_above_share == 1 and summary.pairs == 2
    assert summary.body_length_r == pytest.approx(-1.0)  # two points: longer body, lower share
    assert summarise(results[:1]).body_length_r is None
    assert layer_rows(6) == [("early (layers 1-2)", [0, 1]), ("middle (layers 3-4)", [2, 3]), ("late (layers 5-6)", [4, 5]),
                             ("layer 1", [0]), ("layer 4", [3]), ("layer 6", [5])]
    assert FIELDS == ("name", "description", "body")


def test_attention_report_of_a_trained_yes_no_reranker_run(tmp_path):
    """A cell of sweeps/field_attention.yaml on tiny data with the random stand-in: the CLI reads the run's
    fine-tuned weights and queries from its cache and writes the table and the figure; a run without a
    yes/no reranker gets a clear error."""
    tiny = build_tiny_qwen3(tmp_path / "lm", head="causal_lm")
    sweep, cache = tmp_path / "grid", tmp_path / "cache"
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "-cd", str(ROOT / "sweeps"), "-cn", "field_attention",
                           f"hydra.sweep.dir={sweep}", f"cache_dir={cache}", "progress=false", "data=tiny",
                           f"reranker.base.model={tiny}", "encoder=bm25"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "skillrouter.report.attention", str(sweep / "0"), "--out", str(tmp_path / "out"),
                           "--max-pairs", "5"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "out" / "0.md").read_text()
    assert "5 query-GT pairs" in md and "token share (length baseline)" in md and "{" not in md
    assert (tmp_path / "out" / "0.png").stat().st_size > 0 and (tmp_path / "out" / "0.pdf").exists()
    assert "\\begin{tabular}" in (tmp_path / "out" / "0.tex").read_text()
    from skillrouter.report.__main__ import generate  # make report writes it for every yes/no reranker run

    generate([sweep], tmp_path / "reports")
    assert "](attention/" in (tmp_path / "reports" / "index.md").read_text()
    assert len(list((tmp_path / "reports" / "attention").glob("*.png"))) == 1
    plain = tmp_path / "plain"
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={plain}", f"cache_dir={cache}",
                    "progress=false", "data=tiny", "encoder=bm25"], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    with pytest.raises(ValueError, match="yes/no LM reranker"):
        write_attention(plain / "0", tmp_path / "out", "plain")
