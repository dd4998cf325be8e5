"""The false-negative filter: one crafted near-duplicate per layer, and switches."""
import numpy as np

from skillrouter.data.types import Skill
from skillrouter.train.fn_filter import FalseNegativeFilter, jaccard, trigrams

BODY = "load the invoices from the ledger then merge duplicate rows and write a clean report for finance"
SKILLS = {
    "gt": Skill("gt", "invoice-merger", "d", BODY),
    "same_name": Skill("same_name", "Invoice-Merger", "d", "completely different words here about cats"),
    "near_body": Skill("near_body", "other", "d", BODY + " today"),
    "near_emb": Skill("near_emb", "third", "d", "unrelated text about plotting charts of weather"),
    "fine": Skill("fine", "fourth", "d", "resize photos into thumbnails for the web gallery"),
}
EMB = {k: v / np.linalg.norm(v) for k, v in {
    "gt": np.array([1.0, 0.0]), "same_name": np.array([0.0, 1.0]), "near_body": np.array([0.0, 1.0]),
    "near_emb": np.array([0.95, 0.2]), "fine": np.array([0.5, 0.85])}.items()}


def test_trigram_jaccard_by_hand():
    a, b = trigrams("a b c d"), trigrams("a b c e")
    assert a == {("a", "b", "c"), ("b", "c", "d")} and jaccard(a, b) == 1 / 3


def test_each_layer_catches_its_case_and_counts():
    f = FalseNegativeFilter(SKILLS, EMB)
    assert [f.layer_rejecting(n, ("gt",)) for n in ("same_name", "near_body", "near_emb", "fine")] == [
        "same_name", "body_trigram_jaccard", "embedding_cosine", None]
    kept = [n for n in ("same_name", "near_body", "near_emb", "fine") if f.keep(n, ("gt",))]
    assert kept == ["fine"]
    assert f.report() == {"same_name": 1, "body_trigram_jaccard": 1, "embedding_cosine": 1, "checked": 4,
                          "removed": 3, "removed_fraction": 0.75}


def test_layers_switch_off():
    f = FalseNegativeFilter(SKILLS, EMB, same_name=False, body_trigram_jaccard=None, embedding_cosine=None)
    assert all(f.keep(n, ("gt",)) for n in ("same_name", "near_body", "near_emb"))
