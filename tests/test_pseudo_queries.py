"""Pseudo-queries from the pool: one per skill and source, none for a text several skills share or a labelled skill."""
from __future__ import annotations

import pytest

from skillrouter.data.pseudo_queries import body_lead, pseudo_queries
from skillrouter.data.types import Skill

BODY = """# csv-cleaner

## When to use
Use this skill to remove duplicate rows from csv tables.

```bash
csv-clean --dedupe in.csv
```
- Keep the newest copy of each row.
| a | b |
"""


def test_a_body_lead_is_its_first_lines_of_prose():
    assert body_lead(BODY, 1, 300) == "Use this skill to remove duplicate rows from csv tables."
    assert body_lead(BODY, 2, 300) == ("Use this skill to remove duplicate rows from csv tables. "
                                       "Keep the newest copy of each row.")
    assert body_lead(BODY, 2, 30) == "Use this skill to remove"  # cut at a word
    assert body_lead("```\nonly code\n```\n# Title", 2, 300) == ""


def test_pseudo_queries_name_one_skill_each_and_never_a_labelled_one():
    skills = [Skill("a", "csv-cleaner", "Clean csv files of duplicates.", BODY),
              Skill("b", "csv-sorter", "Practical csv utilities for tables.", "Sort csv tables by a column key.\n"),
              Skill("c", "csv-merger", "Practical csv utilities for tables.", "Merge several csv tables on an id.\n"),
              Skill("d", "pdf-reader", "Read PDF files and extract text.", "Extract the text of every pdf page.\n"),
              Skill("e", "x", "Too short", "")]
    examples = pseudo_queries(skills, excluded={"d"})
    got = {(ex.query, ex.positives) for ex in examples}
    assert ("Clean csv files of duplicates.", ("a",)) in got
    assert ("Sort csv tables by a column key.", ("b",)) in got and ("Merge several csv tables on an id.", ("c",)) in got
    assert not any("Practical csv utilities" in q for q, _ in got)  # b and c share it: it names neither
    assert not any(p == ("d",) for _, p in got)  # a benchmark-labelled skill is never a training target
    assert not any(p == ("e",) for _, p in got)  # two words name nothing
    assert {p for _, p in got} == {("a",), ("b",), ("c",)}
    assert len(pseudo_queries(skills, {"d"}, sources=["body"])) == 3  # a, b, c: the bodies tell them apart
    with pytest.raises(ValueError, match="sources"):
        pseudo_queries(skills, sources=["title"])
