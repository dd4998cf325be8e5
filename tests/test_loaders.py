"""Every pool/benchmark format, and each kind of bad input gets a located error or a counted skip."""
from __future__ import annotations

import gzip

import pytest

from skillrouter.data import DataError, load_dataset
from skillrouter.data.loaders import ErrorPolicy, load_pool, load_queries
from skillrouter.data.types import LoadReport

from .conftest import write_jsonl


def _policy(on_error="raise"):
    return ErrorPolicy(on_error, LoadReport())


def test_pool_jsonl_plain_and_gz(tmp_path, pool_records):
    plain = write_jsonl(tmp_path / "p.jsonl", pool_records)
    gz = tmp_path / "p.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, gz):
        skills = load_pool(path, "auto", _policy(), 10_000)
        assert [s.id for s in skills] == ["a", "b", "c"] and skills[1].body.startswith("Extract")


def test_extra_fields_are_kept(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "name": "n", "license": "MIT"}])
    assert load_pool(path, "jsonl", _policy(), 100)[0].extra == {"license": "MIT"}


@pytest.mark.parametrize("records, line, field", [
    ([{"id": "a", "name": "x"}, {"id": "a", "name": "y"}], 2, "id"),       # duplicate id
    ([{"id": "a", "name": ""}], 1, "name"),                                 # skill without a name
    ([{"id": "a"}], 1, "name"),
    ([{"id": "a", "name": "x", "body": 5}], 1, "body"),                     # wrong type
])
def test_bad_pool_records_name_file_line_field(tmp_path, records, line, field):
    path = write_jsonl(tmp_path / "p.jsonl", records)
    with pytest.raises(DataError) as err:
        load_pool(path, "jsonl", _policy(), 100)
    assert (err.value.path, err.value.where, err.value.field) == (str(path), line, field)
    assert f"p.jsonl:{line}: field '{field}'" in str(err.value)


def test_non_utf8_bytes_name_the_field(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"id": "a", "name": "ok"}\n{"id": "b", "name": "n", "body": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"p.jsonl:2: field 'body': contains bytes that are not valid UTF-8"):
        load_pool(path, "jsonl", _policy(), 100)


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "name": "ok"}\n{"id": "b", "name": \n')
    with pytest.raises(DataError, match=r"p.jsonl:2: invalid JSON"):
        load_pool(path, "jsonl", _policy(), 100)


def test_skip_policy_counts_and_keeps_the_rest(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "name": "x"}, {"id": "a", "name": "y"}, {"id": "b"}])
    policy = _policy("skip")
    skills = load_pool(path, "jsonl", policy, 100)
    assert [s.id for s in skills] == ["a"]
    assert sum(policy.report.skipped.values()) == 2


def test_huge_body_is_truncated_and_counted(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "name": "x", "body": "w" * 5_000_000}])
    policy = _policy()
    skill = load_pool(path, "jsonl", policy, 200_000)[0]
    assert len(skill.body) == 200_000
    assert list(policy.report.skipped) == ["body: truncated to 200000 chars"]


def _skill_md(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_skill_tree_ids_are_relative_folders(tmp_path):
    _skill_md(tmp_path / "owner/repo/csv" / "SKILL.md", "---\nname: csv\ndescription: CSV work\n---\n# Body\nrows\n")
    _skill_md(tmp_path / "pdf" / "SKILL.md", "---\nname: pdf\ndescription: >\n  folded text\n---\nbody\n")
    skills = {s.id: s for s in load_pool(tmp_path, "auto", _policy(), 1000)}
    assert set(skills) == {"owner/repo/csv", "pdf"}
    assert skills["owner/repo/csv"].body == "# Body\nrows\n" and skills["pdf"].description == "folded text"


@pytest.mark.parametrize("text, match", [
    ("no front matter\n", "front matter': missing"),
    ("---\nname: x\n", "front matter': not closed"),
    ("---\nname: [unclosed\n---\nbody", "front matter': invalid YAML"),
    ("---\ndescription: d\n---\nbody", "field 'name': missing"),
])
def test_broken_front_matter(tmp_path, text, match):
    _skill_md(tmp_path / "s" / "SKILL.md", text)
    with pytest.raises(DataError, match=match):
        load_pool(tmp_path, "tree", _policy(), 1000)


def test_benchmark_jsonl_core_gt_tags_and_generic_only_skip(tmp_path):
    path = write_jsonl(tmp_path / "b.jsonl", [
        {"id": "t1", "query": "q", "gt": ["a", "pdf"], "core_gt": ["a"], "task_type": "mixed", "domain": "d"},
        {"id": "t2", "query": "q", "gt": ["pdf"], "core_gt": [], "task_type": "generic_only"},
    ])
    policy = _policy()
    queries, _ = load_queries(path, "auto", policy, 100)
    assert [q.id for q in queries] == ["t1"]
    assert queries[0].gt == ("a",) and queries[0].all_gt == ("a", "pdf") and queries[0].tags["domain"] == "d"
    assert policy.report.skipped == {"protocol: generic_only task excluded": 1}


def test_empty_query_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "b.jsonl", [{"id": "t1", "query": "  ", "gt": ["a"]}])
    with pytest.raises(DataError, match=r"b.jsonl:1: field 'query': empty query text"):
        load_queries(path, "jsonl", _policy(), 100)


def test_skillsbench_task_folders(tmp_path):
    task = tmp_path / "tasks" / "fraud"
    _skill_md(task / "instruction.md", "Find the fraud in the invoices.")
    _skill_md(task / "environment/skills/fuzzy-match/SKILL.md", "---\nname: fuzzy-match\ndescription: d\n---\nb")
    _skill_md(task / "environment/skills/pdf/SKILL.md", "---\nname: pdf\ndescription: d\n---\nb")
    generic = tmp_path / "tasks" / "sheet"
    _skill_md(generic / "instruction.md", "Fill the sheet.")
    _skill_md(generic / "environment/skills/xlsx/SKILL.md", "---\nname: xlsx\ndescription: d\n---\nb")
    policy = _policy()
    queries, skills = load_queries(tmp_path / "tasks", "auto", policy, 100)
    assert [q.id for q in queries] == ["fraud"]
    assert queries[0].gt == ("skillsbench/fuzzy-match",) and queries[0].tags["task_type"] == "mixed"
    assert {s.id for s in skills} == {"skillsbench/fuzzy-match", "skillsbench/pdf", "skillsbench/xlsx"}
    assert policy.report.skipped == {"protocol: generic_only task excluded": 1}


def test_r3_format(tmp_path):
    skills = write_jsonl(tmp_path / "skills.jsonl", [{"id": "s1", "text": "translate | Translate text | Use the API."},
                                                     {"id": "s2", "text": "plot | Draw charts"}])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"query": "translate and plot", "skill_ids": ["s1", "s2"],
                                                  "lang": "zh-en", "n_skills": 2}])
    ds = load_dataset(skills, queries)
    s1, s2 = ds.skills
    assert (s1.name, s1.description, s1.body) == ("translate", "Translate text", "Use the API.")
    assert (s2.name, s2.description, s2.body) == ("plot", "Draw charts", "")
    assert s2.extra["text"] == "plot | Draw charts"  # the released string, verbatim
    q = ds.queries[0]
    assert q.id == "0" and q.gt == ("s1", "s2") and q.tags == {"lang": "zh-en", "n_skills": "2"}


@pytest.mark.parametrize("fmt, records", [
    ("jsonl", [{"id": "q1", "query": "a", "gt": ["a"]}, {"id": "q1", "query": "b", "gt": ["b"]}]),
    ("r3", [{"id": "q1", "query": "a", "skill_ids": ["a"]}, {"id": "q1", "query": "b", "skill_ids": ["b"]}]),
])
def test_repeated_query_id_is_a_located_error(tmp_path, fmt, records):
    path = write_jsonl(tmp_path / "b.jsonl", records)
    with pytest.raises(DataError, match=r"b.jsonl:2: field 'id': duplicate query id 'q1' \(first seen at .*b.jsonl:1\)"):
        load_queries(path, fmt, _policy(), 100)


def test_gt_missing_from_pool_error_and_skip(small_files, tmp_path):
    pool, _ = small_files
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "query": "x", "gt": ["a", "ghost"]},
                                                {"id": "q2", "query": "y", "gt": ["ghost"]}])
    with pytest.raises(DataError, match=r"q.jsonl:query q1: field 'gt': ground-truth ids missing from the pool: \['ghost'\]"):
        load_dataset(pool, queries)
    ds = load_dataset(pool, queries, on_error="skip")
    assert [(q.id, q.gt) for q in ds.queries] == [("q1", ("a",))]
    assert sum(ds.report.skipped.values()) == 2


def test_distractors_join_the_pool(small_files, tmp_path):
    pool, queries = small_files
    extra = write_jsonl(tmp_path / "d.jsonl", [{"id": "d1", "name": "general", "body": "anything"}])
    assert len(load_dataset(pool, queries, distractors=extra).skills) == 4
