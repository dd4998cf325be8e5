"""R3's dataset statistics (issue 18, item 5): counting protocols, directions, lengths and the release path."""
from __future__ import annotations

import numpy as np
import pytest

from skillrouter.report.r3_stats import (R3Data, cluster_quality, from_release, length_table, queries_table, reasons_table,
                                         script, skip_protocols, words, write_r3_stats)
from tests.release_fixtures import r3_skill

JUDGEMENTS = [  # 6 judged sets, 1 failure-free; SKIPs: {a}, {a,b}, {b,c,d}
    {"skills": ["a"], "decision": "SKIP", "direction": "en-en", "category": "too generic"},
    {"skills": ["b"], "decision": "WRITE", "direction": "en-en", "category": None},
    {"skills": ["a", "b"], "decision": "SKIP", "direction": "zh-en", "category": "redundant"},
    {"skills": ["a", "c"], "decision": "WRITE", "direction": "en-en", "category": None},
    {"skills": ["b", "c", "d"], "decision": "SKIP", "direction": "zh-en", "category": "redundant"},
    {"skills": ["c", "e"], "decision": "WRITE", "direction": "en-zh", "category": None},
]
TRAIN = [{"query": "x", "skill_ids": ["b"], "skip": ["a", "c", "d"]}, {"query": "y", "skill_ids": ["a", "c"], "skip": []},
         {"query": "z", "skill_ids": ["c", "e"], "skip": ["b"]}]


def test_skip_counting_protocols_by_hand():
    table = skip_protocols(JUDGEMENTS, TRAIN).set_index("protocol")
    assert table.loc["judged sets", ["SKIP", "counted"]].tolist() == [3, 6]
    assert table.loc["multi-skill sets (k >= 2)", ["SKIP", "counted"]].tolist() == [2, 4]
    assert table.loc["skills in a SKIP set", ["SKIP", "counted"]].tolist() == [4, 5]  # a b c d of a b c d e
    # SKIP pairs: ab, bc, bd, cd = 4; all judged pairs: ab ac bc bd cd ce = 6
    assert table.loc["skill pairs rejected together", ["SKIP", "counted", "share"]].tolist() == [4, 6, 0.667]
    assert table.loc["train pairs carrying SKIP partners", ["SKIP", "counted"]].tolist() == [2, 3]
    assert table.loc["SKIP partners per train pair (mean)", "share"] == pytest.approx(4 / 3, abs=1e-3)


def test_rejection_reasons_by_direction_and_k_by_hand():
    table = reasons_table(JUDGEMENTS).set_index("reason")
    assert list(table.columns) == ["en-en k=1", "en-en k=2", "en-en k=3", "zh-en k=1", "zh-en k=2", "zh-en k=3", "total"]
    assert table.loc["redundant"].tolist() == [0, 0, 0, 0, 1, 1, 2] and table.loc["too generic", "en-en k=1"] == 1
    assert set(table.index) == {"redundant", "too generic"}  # reasons never given are no row


def test_directions_lengths_and_query_counts():
    assert script("把日志按请求分组 with grep") == "zh" and script("group the logs by request id") == "en"
    assert words("把日志 group by") == 5 and words("  two words ") == 2
    queries = [{"text": "a b c", "skills": ["a"], "k": 1, "direction": "en-en", "style": "terse", "split": "train"},
               {"text": "a b c d e", "skills": ["a"], "k": 1, "direction": "en-en", "style": "terse", "split": "train"},
               {"text": "把日志", "skills": ["a", "b"], "k": 2, "direction": "zh-en", "style": None, "split": "test"}]
    data = R3Data("hand", [], queries)
    counts = queries_table(data)
    assert counts.to_dict("records") == [
        {"split": "train", "direction": "en-en", "k=1": 2, "k=2": 0, "k=3": 0, "k>3": 0, "total": 2},
        {"split": "test", "direction": "zh-en", "k=1": 0, "k=2": 1, "k=3": 0, "k>3": 0, "total": 1}]
    lengths = length_table(data).set_index("style")
    assert lengths.loc["terse", "en-en"] == 4.0 and lengths.loc["all", "zh-en"] == 3.0 and np.isnan(lengths.loc["terse", "zh-en"])


def test_cluster_quality_prefers_the_true_number_of_clusters():
    rng = np.random.default_rng(0)
    centres = np.eye(8)[:4] * 10
    x = np.concatenate([c + rng.normal(0, 0.3, (30, 8)) for c in centres]).astype(np.float32)
    quality = cluster_quality(x, [2, 4, 8, 1, 500]).set_index("K")
    assert list(quality.index) == [2, 4, 8]  # K < 2 and K >= points are no row
    assert quality["silhouette (cosine)"].idxmax() == 4


def test_release_statistics_without_judgements(tmp_path):
    """The R3-Skill layout: directions from its field, k from the GT, no SKIP tables (said, not zeros)."""
    data = from_release(r3_skill(tmp_path / "r3"))
    assert [q["direction"] for q in data.queries] == ["en-en", "en-en", "zh-en", "zh-en"] and data.judgements is None
    written = write_r3_stats(data, tmp_path / "out", "release", ks=(2, 3))
    text = written[0].read_text()
    assert "| test    | zh-en       |     1 |     1 |" in text and text.count("no judgements") == 2
    assert "release-reasons.png" not in {p.name for p in written} and "{" not in text
