"""Rendering: nd / all / oracle_nd, per-stage caps, query instruction prefix."""
import pytest

from skillrouter.data.types import Skill
from skillrouter.fields import Caps, render_query, render_skill

SKILL = Skill("s", "csv-kit", "Clean CSV files.", "Step one. Step two.")


def test_modes():
    caps = Caps(300, 2500)
    assert render_skill(SKILL, "nd", caps) == "csv-kit | Clean CSV files."
    assert render_skill(SKILL, "all", caps) == "csv-kit | Clean CSV files. | Step one. Step two."
    assert render_skill(SKILL, "oracle_nd", caps, {"s": "Oracle text."}) == "csv-kit | Oracle text."
    assert render_skill(Skill("t", "n", "own"), "oracle_nd", caps, {"s": "x"}) == "n | own"  # not covered: keeps its own


def test_caps_apply_per_field():
    assert render_skill(SKILL, "all", Caps(5, 4)) == "csv-kit | Clean | Step"


def test_empty_description_leaves_no_double_separator():
    assert render_skill(Skill("e", "n", "", "body"), "all", Caps(10, 10)) == "n | body"


def test_query_prefix_and_cap():
    assert render_query("  find it  ", 4, "Instruct: x\nQuery: ") == "Instruct: x\nQuery: find"


def test_oracle_without_file_is_a_clear_error():
    with pytest.raises(ValueError, match="oracle_nd"):
        render_skill(SKILL, "oracle_nd", Caps(1, 1))
