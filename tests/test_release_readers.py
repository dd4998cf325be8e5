"""SkillRet, SRA-Bench and SkillRetBench read from fixtures in their releases' exact layouts: fields, release
texts, protocols, one-line errors, the same BM25 metrics as the same data in plain JSONL, and training on
SkillRet's train split."""
from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile

import pytest

from skillrouter.cache.store import StageCache
from skillrouter.data import DataError
from skillrouter.data.dataset import load_source, source_files
from skillrouter.fields import Caps, render_skill

from . import release_fixtures
from .conftest import write_jsonl
from .test_launch import launch


def _load(source, root, **data):
    return load_source({"source": source, "root": str(root), **data}, "easy", False)


@pytest.fixture
def skillret(tmp_path):
    return release_fixtures.skillret(tmp_path / "skillret")


def test_skillret_reads_the_test_split_as_its_evaluator_does(skillret, caplog):
    ds = _load("skillret", skillret)
    by_id = {s.id: s for s in ds.skills}
    assert len(ds.skills) == 6 and [q.id for q in ds.queries] == ["q-csv", "q-media", "q-sql"]
    csv = by_id["test/csv-cleaner"]
    assert csv.extra["text"] == f"csv-cleaner | Clean CSV files | {csv.extra['skill_md'].strip()}"
    assert csv.body == release_fixtures.TOPICS[0][2] and csv.category == "data" and csv.source == "fixture"
    sql = by_id["test/sql-tuner"]  # empty skill_md: the description stands in (load_corpus)
    assert sql.extra["text"] == "sql-tuner | Tune SQL | Tune SQL"
    assert render_skill(csv, "all", Caps(None, None), style="release") == csv.extra["text"]
    q_sql = ds.queries[2]
    assert q_sql.gt == ("test/sql-tuner", "test/log-parser")  # labels win over skill_ids
    assert ds.queries[1].tags == {"original_id": "q-media", "k": "2", "generator_model": "fixture", "major": "data+media",
                                  "domain": "data+media"}
    assert ds.report.skipped == {"qrels: disagree with the query's ground truth (the query's is scored)": 1}
    assert "q-media" in ds.report.examples["qrels: disagree with the query's ground truth (the query's is scored)"]


def test_skillret_one_line_errors(skillret):
    path = skillret / "data" / "skills" / "test.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    del records[2]["skill_md"]
    write_jsonl(path, records)
    with pytest.raises(DataError, match=r"skills/test.jsonl:3: field 'skill_md': missing"):
        _load("skillret", skillret)
    del records[2]
    write_jsonl(path, records)  # image-resizer gone: q-media's GT points outside the pool
    with pytest.raises(DataError, match=r"queries/test.jsonl:query q-media: field 'gt': ground-truth ids missing from the "
                                        r"pool: \['test/image-resizer'\]"):
        _load("skillret", skillret)
    (skillret / "data" / "queries" / "test.jsonl").unlink()
    with pytest.raises(DataError, match=r"queries/test.jsonl: missing"):
        _load("skillret", skillret)


def test_skillret_revision_keys_the_data_and_train_role_reads_the_train_pool(skillret):
    from skillrouter.stages.data import load_data

    data = {"source": "skillret", "root": str(skillret), "revision": "7cae7cf"}
    assert load_data(data, "easy", False).key != load_data({**data, "revision": "main"}, "easy", False).key
    train = {**data, "train_pool": str(skillret / "data/skills/train.jsonl"), "train_pool_format": "skillret"}
    ds = load_source(train, "easy", False, role="train")
    assert {s.id for s in ds.skills} == {f"train/{n}" for n, _, _ in release_fixtures.TRAIN_TOPICS}
    assert [q.id for q in ds.queries] == ["q-csv", "q-media", "q-sql"]  # the benchmark's, for the label guard
    assert skillret / "data/skills/train.jsonl" in source_files(train, "easy", False, role="train")
    leaking = {**train, "train_pool": str(skillret / "data/skills.jsonl")}  # the catalog holds the test skills too
    with pytest.raises(DataError, match=r"skills.jsonl: field 'id': 5 training-pool skills are benchmark ground truth"):
        load_source(leaking, "easy", False, role="train")


def test_sra_bench_corpus_instances_and_queries(tmp_path):
    root = release_fixtures.sra_bench(tmp_path / "sra")
    ds = _load("sra_bench", root)
    assert [q.id for q in ds.queries] == ["logicbench_000", "logicbench_001", "theoremqa_000"]
    assert ds.queries[0].tags == {"dataset": "logicbench"} and ds.queries[0].gt == ("sk_002", "sk_003")
    assert ds.queries[0].text == "resize the photos and cut the podcast"  # logicbench: the question, no system prompt
    assert ds.queries[2].text.startswith("Problem:remove the duplicate rows from my table\nSolution:\nYou are a science "
                                         "teacher") and ds.queries[2].text.endswith("(c), (d)")
    skill = ds.skills[5]
    assert skill.extra["text"] == "\n".join(release_fixtures.TOPICS[5]) and skill.extra["tools"] == [{"name": "count_errors"}]
    assert ds.report.skipped == {"protocol: instance without skill_annotations (not scored)": 1}
    assert [q.id for q in _load("sra_bench", root, datasets=["theoremqa"]).queries] == ["theoremqa_000"]
    with zipfile.ZipFile(root / "data/bench/corpus/corpus.json.zip") as z:  # unzipped, as the release's README says
        (root / "data/bench/corpus/corpus.json").write_bytes(z.read("corpus.json"))
    (root / "data/bench/corpus/corpus.json.zip").unlink()
    assert len(_load("sra_bench", root).skills) == 6


def test_sra_bench_one_line_errors(tmp_path):
    root = release_fixtures.sra_bench(tmp_path / "sra")
    inst = root / "data/bench/instances/logicbench.json"
    records = json.loads(inst.read_text())
    records[1]["skill_annotations"] = ["sk_004", "sk_999"]
    inst.write_text(json.dumps(records))
    with pytest.raises(DataError, match=r"instances:query logicbench_001: field 'gt': ground-truth ids missing from the "
                                        r"pool: \['sk_999'\]"):
        _load("sra_bench", root)
    del records[1]["question"]
    inst.write_text(json.dumps(records))
    with pytest.raises(DataError, match=r"logicbench.json:instance 1 \(logicbench_001\): field 'question': missing"):
        _load("sra_bench", root)
    with pytest.raises(DataError, match=r"instances/toolqa.json: missing"):
        _load("sra_bench", root, datasets=["toolqa"])
    toolqa = root / "data/bench/instances/toolqa.json"
    toolqa.write_text(json.dumps([{"instance_id": "toolqa_000", "dataset": "toolqa", "question": "q", "skill_annotations": ["sk_000"]}]))
    with pytest.raises(DataError, match=r"toolqa/prompts.py: field 'REACT_INSTRUCTION': ToolQA's retrieval query needs it"):
        _load("sra_bench", root, datasets=["toolqa"])
    (root / "data/bench/corpus/corpus.json.zip").unlink()
    with pytest.raises(DataError, match=r"corpus.json.zip: missing"):
        _load("sra_bench", root)


def test_sra_bench_toolqa_query_from_a_release_checkout(tmp_path):
    root = release_fixtures.sra_bench(tmp_path / "sra")
    src = root / "src/sragents/toolqa"
    src.mkdir(parents=True)
    (src / "prompts.py").write_text('"""doc"""\nREACT_INSTRUCTION = """Solve it.\nStep by step."""\n')
    (src / "fewshots.py").write_text('EASY = "Question: a"\nHARD = """Question: b"""\nTOOLQA_EXAMPLES = EASY + "\\n" + HARD\n')
    (root / "data/bench/instances/toolqa.json").write_text(json.dumps([
        {"instance_id": "toolqa_000", "dataset": "toolqa", "question": "how many rows?", "skill_annotations": ["sk_000"]}]))
    ds = _load("sra_bench", root, datasets=["toolqa"])
    assert ds.queries[0].text == "Question: how many rows?\nSolve it.\nStep by step.\nQuestion: a\nQuestion: b"


def test_skillretbench_files_and_outdated_ids(tmp_path):
    root = release_fixtures.skillretbench(tmp_path / "srb")
    ds = _load("skillretbench", root)
    assert [s.name for s in ds.skills] == [n for n, _, _ in release_fixtures.TOPICS] and ds.skills[0].category == "data"
    assert ds.skills[0].body == release_fixtures.TOPICS[0][2] and ds.skills[0].extra["trigger_phrases"] == ["csv cleaner"]
    assert [q.tags["setting"] for q in ds.queries] == ["single", "composition", "versioned"]
    assert ds.queries[0].tags["distractor_skills"] == '["srb-1"]' and ds.queries[1].gt == ("srb-2", "srb-3")
    assert ds.report.skipped == {"queries: outdated_skill_id not in the corpus (reported, not an error)": 1}
    top = json.loads((root / "skillretbench_queries.json").read_text())
    del top["queries"][2]["gold_skills"]
    (root / "skillretbench_queries.json").write_text(json.dumps(top))
    with pytest.raises(DataError, match=r"skillretbench_queries.json:queries\[2\] \(srbq-2\): field 'gold_skills': missing"):
        _load("skillretbench", root)
    (root / "data").mkdir()  # the hub repository's layout: both files under data/
    for name in ("skill_corpus.json", "skillretbench_queries.json"):
        (root / name).rename(root / "data" / name)
    with pytest.raises(DataError, match=r"data/skillretbench_queries.json:queries\[2\] \(srbq-2\): field 'gold_skills'"):
        _load("skillretbench", root)
    (root / "data" / "skill_corpus.json").write_text("[]")
    with pytest.raises(DataError, match=r"skill_corpus.json: field 'skills': expected a top-level object"):
        _load("skillretbench", root)


def _plain_copy(ds, tmp_path):
    """The same pool and queries as our plain JSONL."""
    pool, queries = tmp_path / "plain_pool.jsonl", tmp_path / "plain_queries.jsonl"
    write_jsonl(pool, [{"id": s.id, "name": s.name, "description": s.description, "body": s.body} for s in ds.skills])
    write_jsonl(queries, [{"id": q.id, "query": q.text, "gt": list(q.gt)} for q in ds.queries])
    return pool, queries


@pytest.mark.slow
@pytest.mark.parametrize("release", ["skillret", "sra_bench", "skillretbench"])
def test_a_release_layout_and_plain_jsonl_give_the_same_bm25_metrics(tmp_path, release):
    root = getattr(release_fixtures, release)(tmp_path / release)
    pool, queries = _plain_copy(_load(release, root), tmp_path)
    common = ("encoder=bm25", "data.text_style=joined", "eval=r3")
    for side in ("release", "plain"):
        (tmp_path / side).mkdir()
    released = launch(tmp_path / "release", f"data={release}", f"data.root={root}", *common, multirun=False)
    plain = launch(tmp_path / "plain", "data=jsonl", f"data.pool={pool}", f"data.queries={queries}", *common, multirun=False)
    assert released.returncode == 0 and plain.returncode == 0, (released.stderr + plain.stderr)[-3000:]
    metrics = [json.loads((tmp_path / side / "run" / "metrics.json").read_text())["metrics"] for side in ("release", "plain")]
    assert metrics[0] == metrics[1] and metrics[0]["r@5"] > 0


@pytest.mark.slow
def test_trained_models_run_end_to_end_from_skillrets_train_split(tmp_path, skillret):
    """No synthesis stage: the train queries are the pairs, the train skills the pool that negatives and the
    reranker's training candidates come from."""
    proc = launch(tmp_path, "data=skillret", f"data.root={skillret}", "encoder=trained", "reranker=trained", "eval=skillret",
                  "reranker.train.batch_size=2", "reranker.list_size=3", "reranker.base.max_length=64",
                  "encoder.train.batch_size=2", "encoder.negatives.semantic=1", "encoder.negatives.lexical=1",
                  "encoder.negatives.category=0", "encoder.negatives.random=1", "encoder.base.max_seq_length=32",
                  multirun=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["n_queries"] == 3 and {"ndcg@10", "map@10", "fc@15"} <= set(m["metrics"])
    assert m["data"]["config"]["revision"] == "7cae7cfbad2b0e1ebc9170892f568993aae543b0" and m["synth"] == {}
    stages, cache = m["stages"], StageCache(tmp_path / "cache")
    assert not any(name.startswith("synth") for name in stages)
    assert cache.manifest("train_pairs", stages["train_pairs"]["key"])["n_examples"] == 6
    assert cache.manifest("load_data", stages["load_data_base"]["key"])["n_skills"] == 5  # the train pool
    assert {"reranker_candidates", "train_reranker", "rerank"} <= set(stages)


def test_a_pinned_revision_downloads_into_its_own_folder(tmp_path, skillret, monkeypatch):
    from skillrouter.data import download

    seen = []

    def fake_hub(dest, revision):  # stands in for snapshot_download(..., revision=revision)
        seen.append(revision)
        shutil.copytree(skillret, dest, dirs_exist_ok=True)

    monkeypatch.setitem(download.RELEASES, "skillret", dataclasses.replace(download.RELEASES["skillret"], fetch=fake_hub))
    v1 = download.ensure_release("skillret", tmp_path / "data", "7cae7cf")
    assert v1.name == "skillret@7cae7cf" and seen == ["7cae7cf"]
    assert download.ensure_release("skillret", tmp_path / "data", "7cae7cf") == v1 and seen == ["7cae7cf"]
    assert download.ensure_release("skillret", tmp_path / "data", "main").name == "skillret@main"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(download.RELEASES, "skillret", dataclasses.replace(
        download.RELEASES["skillret"], fetch=download.hub_fetch(download.SKILLRET_REPO, download.SKILLRET_PATTERNS)))
    with pytest.raises(DataError, match=r"skillret could not be downloaded .*python -m skillrouter.data.download skillret "
                                        r"--revision REV --dest DIR"):
        download.ensure_release("skillret", tmp_path / "offline", "7cae7cf")


@pytest.mark.slow
def test_skillrets_recipe_trains_on_its_train_split_with_cached_gradients(tmp_path, skillret):
    """recipe=skillret: in-batch negatives only, batch 384 (here the whole train split in one step), mini-batches
    of 32 texts; on this CPU with MiniLM as the base."""
    proc = launch(tmp_path, "data=skillret", f"data.root={skillret}", "recipe=skillret", "encoder@encoder.base=minilm",
                  "encoder.base.max_seq_length=32", "encoder.train.mini_batch=4", "eval=skillret", multirun=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    cache = StageCache(tmp_path / "cache")
    trained = cache.manifest("train_encoder", m["stages"]["train_encoder"]["key"])
    assert trained["n_examples"] == 6 and trained["loss_first"] is not None
    negatives = json.loads((cache.entry("mine_negatives", m["stages"]["mine_negatives"]["key"]) / "negatives.json").read_text())
    assert negatives == [[]] * 6  # no mined negatives: the batch's other positives are the negatives
