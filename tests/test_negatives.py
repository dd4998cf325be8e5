"""Hard-negative mining from four sources, with the false-negative filter in the loop."""
from skillrouter.data.types import Skill
from skillrouter.train.fn_filter import FalseNegativeFilter
from skillrouter.train.negatives import NegativeCounts, mine_negatives
from skillrouter.data.pairs import TrainExample

SKILLS = [Skill(f"{cat}{i}", f"{cat}-{i}", "", f"body {cat} {i} words here", category=cat)
          for cat in ("a", "b", "c") for i in range(6)]
SKILLS.append(Skill("a-twin", "a-0", "", "other text entirely", category="a"))  # same name as the GT a0
EXAMPLES = [TrainExample("query", ("a0",))]
SEMANTIC = [["a0", "a-twin", "a1", "a2", "a3", "b0", "b1"]]
LEXICAL = [["b2", "a0", "b3", "c0", "c1"]]


def test_sources_counts_and_no_positive():
    negs, contributed = mine_negatives(EXAMPLES, SKILLS, SEMANTIC, LEXICAL, NegativeCounts(), None, seed=0)
    assert contributed == {"semantic": 4, "lexical": 3, "category": 2, "random": 1}
    assert len(negs[0]) == 10 == len(set(negs[0])) and "a0" not in negs[0]
    assert set(negs[0][:4]) <= set(SEMANTIC[0]) and set(negs[0][4:7]) <= set(LEXICAL[0])
    assert all(n.startswith("a") for n in negs[0][7:9])          # same category as the positive
    assert not negs[0][9].startswith("a")                        # random, another category


def test_filter_rejects_a_false_negative_the_source_would_give():
    semantic = [["a-twin", "a1", "a2", "a3", "b0"]]
    counts = NegativeCounts(semantic=5, lexical=0, category=0, random=0)
    plain, _ = mine_negatives(EXAMPLES, SKILLS, semantic, LEXICAL, counts, None, seed=0)
    assert "a-twin" in plain[0]
    fn = FalseNegativeFilter({s.id: s for s in SKILLS}, None, embedding_cosine=None)
    negs, contributed = mine_negatives(EXAMPLES, SKILLS, semantic, LEXICAL, counts, fn, seed=0)
    assert "a-twin" not in negs[0] and contributed["semantic"] == 4
    assert fn.removed == {"same_name": 1, "body_trigram_jaccard": 0, "embedding_cosine": 0}


def test_deterministic_for_a_seed():
    run = lambda seed: mine_negatives(EXAMPLES, SKILLS, SEMANTIC, LEXICAL, NegativeCounts(), None, seed)[0]  # noqa: E731
    assert run(1) == run(1)
