"""The stage graph and the plan: Merkle keys known before anything is built, shared stages, the grid's
pair-score depth, no-op overrides, cells that are one computation, cost estimates, job units."""
from __future__ import annotations

import json
import os
import platform
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from skillrouter.cache.store import StageCache
from skillrouter.pipeline.compose import compose_cell
from skillrouter.pipeline.execute.build import Builder
from skillrouter.pipeline.execute.local import LocalExecutor
from skillrouter.pipeline.execute.slurm import plan_units, scoring_groups
from skillrouter.pipeline.journal import StageJournal
from skillrouter.pipeline.plan import noop_refusal, plan_grid, render
from skillrouter.stages.graph import walk

from .conftest import ROOT, write_jsonl

USER_GRID = [(f"loss={loss}", f"topk={k}") for loss in ("listwise", "pointwise") for k in (10, 20, 50)]


@pytest.fixture
def cells(tmp_path):
    """``cells(overrides per cell, *shared)`` -> ({index: CellGraph}, {index: overrides}), composed as a
    grid launcher composes them (the deepest topk per reranker found first)."""

    def make(grid, *shared):
        configs = {}
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            for i, cell in enumerate(grid):
                overrides = [*cell, *shared, f"cache_dir={tmp_path / 'cache'}", "data=tiny"]
                cfg = compose("config", overrides=overrides, return_hydra_config=True)
                HydraConfig.instance().set_config(cfg)
                configs[i] = (cfg, list(cell))
        depths: dict[str, int] = {}
        for cfg, _ in configs.values():
            for identity, k in compose_cell(cfg).pair_groups.items():
                depths[identity] = max(depths.get(identity, 0), k)
        return {i: compose_cell(cfg, depths) for i, (cfg, _) in configs.items()}, {i: ov for i, (_, ov) in configs.items()}

    return make


def test_keys_follow_from_the_config_alone_and_stay_after_building(cells, tmp_path):
    graphs, _ = cells([("encoder=bm25",), ("encoder=bm25", "fields=nd")])
    before = [s.key for g in graphs.values() for s in g.stages()]
    LocalExecutor(Builder(StageCache(tmp_path / "cache"), progress=False)).run([g.sink for g in graphs.values()])
    again, _ = cells([("encoder=bm25",), ("encoder=bm25", "fields=nd")])
    assert [s.key for g in again.values() for s in g.stages()] == before
    a, b = graphs[0].named, graphs[1].named
    assert a["load_data"].key == b["load_data"].key and a["retrieve"].key != b["retrieve"].key  # shared upstream only


def test_a_user_file_is_keyed_by_its_content(cells, tmp_path, pool_records):
    pool = write_jsonl(tmp_path / "pool.jsonl", pool_records)
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q", "query": "csv", "gt": ["a"]}])
    grid = [("data=jsonl", f"data.pool={pool}", f"data.queries={queries}", "encoder=bm25")]
    first = cells(grid)[0][0].named["load_data"].key
    write_jsonl(pool, pool_records[:2])  # same path, other content
    assert cells(grid)[0][0].named["load_data"].key != first


def test_training_is_shared_by_both_tiers_and_embedding_shards_are_not_identity(cells):
    graphs, _ = cells([("encoder=trained", "reranker=trained", "tier=easy"), ("encoder=trained", "reranker=trained", "tier=hard"),
                       ("encoder=trained", "embed.shards=2")])
    easy, hard, sharded = (graphs[i].named for i in range(3))
    for name in ("train_encoder", "mine_negatives", "train_reranker", "embed_pool_train"):
        assert easy[name].key == hard[name].key
    assert easy["load_data"].key != hard["load_data"].key
    # the built-in data trains on a pool of its own (no evaluated skill in it), embedded apart from the benchmark's
    assert easy["embed_pool"].key != easy["embed_pool_train"].key
    assert easy["load_data_base"].params["role"] == "train" and easy["load_data_base"].key != easy["load_data"].key
    assert easy["reranker_candidates"].inputs["data"].key == easy["load_data_base"].key  # candidates from that pool
    assert sharded["embed_pool"].key == easy["embed_pool"].key and len(sharded["embed_pool"].after) == 2
    assert sharded["embed_pool/shard0"].key != sharded["embed_pool/shard1"].key


def test_pair_scores_are_computed_once_to_the_grids_deepest_topk(cells):
    graphs, _ = cells([("reranker=minilm_ce", "topk=3"), ("reranker=minilm_ce", "topk=5")])
    scores = {g.named["score_pairs"].key for g in graphs.values()}
    assert len(scores) == 1 and graphs[0].named["score_pairs"].params["depth"] == 5
    assert graphs[0].named["rerank"].key != graphs[1].named["rerank"].key and graphs[0].named["rerank"].cheap


def test_a_cold_plan_builds_all_and_a_warm_one_nothing(cells, tmp_path):
    graphs, overrides = cells([("encoder=bm25",), ("encoder=minilm",)])
    cache = StageCache(tmp_path / "cache")
    cold = plan_grid(graphs, cache, overrides)
    assert {p.state for p in cold.stages} == {"build"} and cold.totals()["gpu_to_build"] == 2  # embed + retrieve
    assert [p.cells for p in cold.stages if p.stage.kind == "load_data"] == [[0, 1]]
    LocalExecutor(Builder(cache, progress=False)).run([g.sink for g in graphs.values()])
    built = {p.parent.parent.name + "/" + p.parent.name for p in (tmp_path / "cache").glob("*/*/manifest.json")}
    assert built == {f"{p.stage.kind}/{p.stage.key}" for p in cold.to_build()}
    warm = plan_grid(graphs, cache, overrides)
    assert warm.to_build() == [] and "reused" in render(warm)
    assert {p.stage.kind for p in warm.stages} == {"load_data", "retrieve"}  # nothing above a cached stage is needed


def test_the_design_cards_command_is_one_computation(cells):
    graphs, overrides = cells(USER_GRID)
    plan = plan_grid(graphs, StageCache("/nonexistent"), overrides)
    assert [n.key for n in plan.noops] == ["loss", "topk"] and plan.duplicates == [[0, 1, 2, 3, 4, 5]]
    line = noop_refusal(plan)
    assert line.startswith("skillrouter: loss=listwise,pointwise and topk=10,20,50 change nothing in this grid")
    assert "train_reranker (reranker=trained)" in line and "allow_noop_overrides=true" in line
    trained, overrides = cells(USER_GRID, "reranker=trained")
    plan = plan_grid(trained, StageCache("/nonexistent"), overrides)
    assert plan.noops == [] and plan.duplicates == [] and noop_refusal(plan) is None


def test_worker_processes_build_gpu_class_stages_side_by_side_where_no_gpu_is_visible(cells, tmp_path, monkeypatch):
    from skillrouter.pipeline.execute.processes import StageProcesses

    monkeypatch.setattr("skillrouter.pipeline.execute.local.gpu_visible", lambda: False)
    submitted, submit = [], StageProcesses.submit

    def recorded(pool, fn, stage, sharing=1):
        submitted.append((stage.kind, sharing))
        return submit(pool, fn, stage, sharing=sharing)

    monkeypatch.setattr(StageProcesses, "submit", recorded)
    graphs, overrides = cells([("encoder=minilm", "fields=nd"), ("encoder=minilm", "fields=all")])
    cache, journal = StageCache(tmp_path / "cache"), StageJournal(tmp_path / "sweep")
    cold = plan_grid(graphs, cache, overrides)
    builder = Builder(cache, journal, progress=False)
    outcomes = LocalExecutor(builder, workers=2, processes=True).run([g.sink for g in graphs.values()])
    assert not [o.failure for o in outcomes.values() if o.failure]
    built = {p.parent.parent.name + "/" + p.parent.name for p in (tmp_path / "cache").glob("*/*/manifest.json")}
    assert built == {f"{p.stage.kind}/{p.stage.key}" for p in cold.to_build()}
    assert set(builder.records) == set(outcomes)  # what the workers built is this builder's record too
    records = journal.all()
    assert {r["state"] for r in records.values()} == {"built"} and os.getpid() not in {r["pid"] for r in records.values()}
    assert [s for s in submitted if s[0] == "embed_pool"] == [("embed_pool", 2)] * 2  # side by side, a core each
    assert submitted[0][1] == 1  # the first stage (the data) starts alone: it keeps every core


def test_a_worker_process_runs_closures_on_its_share_of_the_cores_in_the_callers_environment_and_returns_their_errors():
    from skillrouter.models import available_cores
    from skillrouter.pipeline.execute.processes import StageProcesses

    def threads_and_pid() -> tuple[int, int]:  # a local function: only cloudpickle sends it
        import torch

        return torch.get_num_threads(), os.getpid()

    def fails() -> None:
        raise ValueError("record 3, field 'body': not a string")

    def llm_url() -> str | None:
        return os.environ.get("SKILLROUTER_LLM_URL")

    with pytest.MonkeyPatch.context() as env, StageProcesses(2) as pool:
        env.delenv("SKILLROUTER_LLM_URL", raising=False)
        alone, beside = pool.submit(threads_and_pid).result(), pool.submit(threads_and_pid, sharing=2).result()
        error = pool.submit(fails).exception()
        env.setenv("SKILLROUTER_LLM_URL", "http://127.0.0.1:9/v1")  # after the workers started, as a grid's LLM server
        started_later = [pool.submit(llm_url).result() for _ in range(2)]
        env.delenv("SKILLROUTER_LLM_URL")
        unset_again = pool.submit(llm_url).result()
    assert alone[0] == available_cores() and beside[0] == max(1, available_cores() // 2)
    assert os.getpid() not in {alone[1], beside[1]}
    assert isinstance(error, ValueError) and str(error) == "record 3, field 'body': not a string"
    assert started_later == ["http://127.0.0.1:9/v1"] * 2 and unset_again is None


FAULTS_OF_A_BLOCK = """
import resource, sys
if sys.argv[1] == "builder":  # build a stage (the cheapest: the built-in data's generation)
    from skillrouter.cache.store import StageCache
    from skillrouter.pipeline.execute.build import Builder
    from skillrouter.stages.data import builtin_data
    Builder(StageCache(sys.argv[2]), progress=False).build(builtin_data({}))
def faults():  # minor page faults of writing a 64 MB block, then freeing it (bytearray zero-fills every page)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = bytearray(64 << 20)
    del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
print(faults())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="keeping freed memory is a glibc malloc setting")
def test_a_process_that_builds_stages_reuses_the_large_blocks_it_frees(tmp_path):
    import subprocess

    def second_block(kind: str) -> int:
        return int(subprocess.run([sys.executable, "-c", FAULTS_OF_A_BLOCK, kind, str(tmp_path)], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout)

    pages = (64 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert second_block("plain") > 0.9 * pages  # glibc maps a block over 32 MB afresh: every page faults again
    assert second_block("builder") < 0.05 * pages


def test_an_override_that_counts_for_some_cells_is_not_a_noop(cells):
    graphs, overrides = cells([(f"reranker={r}", f"topk={k}") for r in ("none", "minilm_ce") for k in (3, 5)])
    plan = plan_grid(graphs, StageCache("/nonexistent"), overrides)
    assert plan.noops == [] and plan.duplicates == [[0, 1]]


def test_an_estimate_scales_an_earlier_builds_seconds_per_item(cells, tmp_path):
    graphs, overrides = cells([("encoder=minilm",)])
    cache = StageCache(tmp_path / "cache")
    LocalExecutor(Builder(cache, progress=False)).run([graphs[0].sink])
    embed = graphs[0].named["embed_pool"]
    manifest = json.loads((cache.entry(embed.kind, embed.key) / "manifest.json").read_text())
    other, overrides = cells([("encoder=minilm", "fields=nd")])  # same encoder and pool, other rendering: to build
    plan = plan_grid(other, cache, overrides)
    planned = next(p for p in plan.stages if p.stage.kind == "embed_pool")
    n = json.loads((cache.entry("load_data", other[0].named["load_data"].key) / "manifest.json").read_text())["n_skills"]
    assert planned.state == "build" and planned.estimate_s == pytest.approx(manifest["build_seconds"] / manifest["items"] * n, abs=0.1)


def _units(cells, tiers=("easy",)):
    grid = [(*cell, f"tier={tier}") for cell in USER_GRID for tier in tiers]
    graphs, overrides = cells(grid, "encoder=trained", "reranker=trained")
    return plan_units(plan_grid(graphs, StageCache("/nonexistent"), overrides)), graphs


def test_job_units_keep_cpu_stages_off_gpus_and_group_what_follows_in_one_job(cells):
    units, graphs = _units(cells)
    for i, unit in enumerate(units):
        assert {s.resource for s in unit.stages} == {unit.primary.resource}, "CPU-class stages never share a GPU job"
        assert not (unit.primary.cheap and unit.primary.resource == "cpu") and all(d < i for d in unit.deps)
    jobs = sorted([s.kind for s in u.stages] for u in units)
    assert jobs == sorted([["embed_pool", "retrieve"],  # a dense retrieval follows the pool embedding it reads
                           ["retrieve"], ["mine_negatives"],  # BM25 and mining: CPU jobs
                           # the trained encoder embeds two pools (the built-in data trains on a pool of its own):
                           # the benchmark's for its queries, the training pool's for the reranker's training
                           # candidates and the dev queries its early stopping reorders; neither is its only reader
                           ["train_encoder"], ["embed_pool", "retrieve"], ["embed_pool", "retrieve", "retrieve"],
                           ["train_reranker"], ["train_reranker"], ["score_pairs"], ["score_pairs"]])
    every = {s.key for s in walk([g.sink for g in graphs.values()]) if not s.virtual}
    assert {s.key for u in units for s in u.stages} <= every  # cheap CPU stages run inside the jobs that read them


def test_the_cells_of_each_reranker_are_scored_after_its_own_jobs_only(cells):
    """Stage dispatch scores the cells in one array per set of stage jobs they wait for: the user's grid
    makes two, the cells of one loss each, neither waiting for the other loss's reranker."""
    units, graphs = _units(cells)
    job_ids = {s.key: f"job{i}" for i, u in enumerate(units) for s in u.stages}
    reranker_job = {job_ids[u.primary.key]: u.primary.params["loss"]["name"] for u in units if u.primary.kind == "train_reranker"}
    groups = scoring_groups([*graphs, 99], graphs, job_ids)  # 99: a cell that failed to compose
    assert groups.pop(()) == [99]
    assert sorted(groups.values()) == [[0, 1, 2], [3, 4, 5]]
    for deps, group in groups.items():
        (mine,) = set(deps) & set(reranker_job)
        assert {USER_GRID[i][0] for i in group} == {f"loss={reranker_job[mine]}"}
        assert set(deps) == {job_ids[s.key] for s in graphs[group[0]].stages() if s.key in job_ids}


def test_stages_that_could_run_side_by_side_are_not_grouped(cells):
    units, _ = _units(cells, ("easy", "hard"))  # two pools to embed and to score per trained model
    primaries = sorted(u.primary.kind for u in units)
    # the base encoder's and the trained one's embedding of the training pool, the trained one's of each tier's pool
    assert primaries.count("embed_pool") == 4 and primaries.count("score_pairs") == 4
    assert all(len(u.stages) == 1 for u in units if u.primary.kind in ("train_encoder", "train_reranker"))


def test_a_stage_another_job_is_building_plans_as_building(cells, tmp_path):
    graphs, overrides = cells([("encoder=bm25",)])
    retrieve = graphs[0].named["retrieve"]
    lock = tmp_path / "cache" / retrieve.kind / f"{retrieve.key}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"host": "another-node", "pid": 1, "token": "t"}))
    states = {p.stage.kind: p.state for p in plan_grid(graphs, StageCache(tmp_path / "cache"), overrides).stages}
    assert states == {"builtin_data": "build", "load_data": "build", "retrieve": "building"}


def test_two_jobs_building_one_cheap_stage_leave_it_built(cells, tmp_path):
    """Job A builds the stage; job B, which needed it too, finds it cached, whichever of them writes last: the
    journal keeps A's ``built`` (a ``reused`` over it hid who built the stage, for status and the cells)."""
    graphs, _ = cells([("encoder=bm25",)])
    load = graphs[0].named["load_data"]
    journal, cache = StageJournal(tmp_path / "sweep"), StageCache(tmp_path / "cache")
    job_a, job_b = (Builder(cache, journal, progress=False, job_id=j) for j in ("1", "2"))
    job_a.ensure_inputs(load)
    job_a.build(load)
    job_b.build(load)
    assert journal.read(load)["state"] == "built" and journal.read(load)["job_id"] == "1"
    journal.write(load, "running", job_id="1")  # B finds it cached while A has not journaled its build yet
    job_b.build(load)
    assert journal.read(load)["state"] == "reused"
    journal.write(load, "built", job_id="1")
    job_b.build(load)
    assert journal.read(load)["state"] == "built"


def test_planning_and_a_stage_job_start_without_the_training_libraries():
    """The launcher plans, and every SLURM stage job unpickles its work, by importing the stage graph; the
    libraries only a build needs (torch ~3 s, sentence-transformers ~4 s more) load when that build runs, so
    a BM25, mining or scoring job never loads them."""
    import subprocess

    heavy = ("torch", "sentence_transformers", "transformers", "peft", "sklearn", "faiss", "bm25s", "wandb")
    code = ("import sys, skillrouter.pipeline.plan, skillrouter.pipeline.execute.slurm; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_submission_waves_group_siblings_into_arrays_cut_at_the_queue_cap():
    from skillrouter.pipeline.execute.slurm import Unit, submission_waves
    from skillrouter.stages.graph import Stage

    shards = [Unit([Stage("embed_shard", lambda ctx: None, {"i": i}, resource="gpu")]) for i in range(5)]
    merge = Unit([Stage("retrieve", lambda ctx: None, {"k": 1}, resource="gpu")], deps=[0, 1, 2, 3, 4])
    mine = Unit([Stage("mine_negatives", lambda ctx: None, {"k": 1})], deps=[5])
    units = [*shards, merge, mine]
    assert submission_waves(units, {}) == [[[0, 1, 2, 3, 4]], [[5]], [[6]]]
    assert submission_waves(units, {}, max_queued=2) == [[[0, 1], [2, 3], [4]], [[5]], [[6]]]


def test_a_stage_whose_input_is_not_built_is_estimated_from_an_entry_of_the_same_data(cells, tmp_path):
    """After a code change every key is new and nothing is built, but the cache holds the earlier builds: the
    dataset an older entry parsed from the same files says how many items the new embedding will take."""
    graphs, _ = cells([("encoder=minilm",)])
    cache = StageCache(tmp_path / "cache")
    LocalExecutor(Builder(cache, progress=False)).run([graphs[0].sink])
    embed = graphs[0].named["embed_pool"]
    built = json.loads((cache.entry(embed.kind, embed.key) / "manifest.json").read_text())
    for stage in graphs[0].stages():  # every entry now stands under another key, as after an edit of the stages' code
        cache.entry(stage.kind, stage.key).rename(cache.entry(stage.kind, "0" * 16))
    plan = plan_grid(graphs, cache, {0: []})
    planned = next(p for p in plan.stages if p.stage.kind == "embed_pool")
    assert planned.state == "build" and planned.estimate_s == pytest.approx(built["build_seconds"], abs=0.1)
    assert plan.totals()["gpu_estimate_s"] is not None


def test_a_plan_estimates_never_built_trainings_and_names_what_it_cannot(cells, tmp_path):
    """After the demo only the data (the training pool's too) and MiniLM's pool are built: the trainings' kinds were
    never built here. Their items come from the pairs file (the pseudo-queries' candidates: at most one per
    training-pool skill and source), their rate from the reference rate of MiniLM scaled by the model's size; a model
    whose size nothing tells leaves its stage out of the total, and the total says so."""
    from skillrouter.pipeline.plan import REFERENCE_RATES

    graphs, overrides = cells([("encoder=minilm",)])
    cache = StageCache(tmp_path / "cache")
    trained, _ = cells([("encoder=trained", "reranker=trained")])
    LocalExecutor(Builder(cache, progress=False)).run([graphs[0].sink, trained[0].named["load_data_base"]])
    trained, overrides = cells([("encoder=trained", "reranker=trained", f"loss={loss}") for loss in ("listwise", "pointwise")]
                               + [("encoder=trained", "reranker=trained", "reranker.pretrain.epochs=1")])
    plan = plan_grid(trained, cache, overrides)
    by_kind = {p.stage.kind: p for p in plan.stages}
    pairs = trained[0].named["train_pairs"]
    lines = sum(1 for line in (cache.entry(pairs.inputs["pairs"].kind, pairs.inputs["pairs"].key)
                               / pairs.params["files"]["pairs"]).read_text().splitlines() if line.strip())
    encoder = by_kind["train_encoder"]
    epochs = encoder.stage.params["train"]["epochs"]  # at most: early stopping may end it sooner
    assert encoder.estimated == "reference"
    assert encoder.estimate_s == pytest.approx(REFERENCE_RATES["train_encoder"] * lines * epochs, abs=0.1)
    assert by_kind["train_reranker"].estimated == "reference"
    pseudo = next(p for p in plan.stages if "reranker_pretrain_candidates" in p.names)  # its queries not built yet
    assert pseudo.state == "build" and pseudo.estimated == "history" and pseudo.estimate_s is not None
    assert all(p.estimate_s is not None for p in plan.to_build() if p.stage.resource == "gpu")
    assert "gpu_unestimated" not in plan.totals()
    # a base whose size no name, package or config.json tells: its trainings are left out, and the total says how many
    odd = tmp_path / "odd-model"
    odd.mkdir()
    unknown, overrides = cells([("encoder=trained", f"encoder.base.model={odd}")])
    plan = plan_grid(unknown, cache, overrides)
    planned = next(p for p in plan.stages if p.stage.kind == "train_encoder")
    assert planned.estimate_s is None and planned.estimated == "never built of their kind"
    assert [p.stage.kind for p in plan.to_build() if p.stage.resource == "gpu" and p.estimate_s is None] == ["train_encoder"]
    n, total = plan.totals()["gpu_to_build"], render(plan, full=False)
    assert f"to build {n} gpu (~" in total and f" s for {n - 1} of {n}; 1 never built of their kind)" in total, total


def test_trainings_stop_early_on_the_dev_split_and_never_on_the_test_queries(cells):
    """By default a trained encoder and reranker watch the dev split (held out of their pairs): the reranker reads its
    queries' first-stage rankings from the training pool, never the benchmark's; `early_stopping=null` trains every
    epoch on every pair, with the keys it would have without the rule."""
    cell = cells([("encoder=trained", "reranker=trained")])[0][0]
    named = cell.named
    for name in ("train_encoder", "train_reranker"):
        stage = named[name]
        assert stage.inputs["dev"].kind == "dev_split" and stage.inputs["pairs"].key == named["dev_split"].key, name
        assert stage.params["early_stopping"]["patience"] >= 1 and stage.params["objective"] == "mrr@10", name
    dev_candidates = named["train_reranker"].inputs["dev_candidates"]
    assert dev_candidates.inputs["data"].kind == "dev_split"
    ranked = [s for s in walk([named["train_reranker"]]) if s.kind == "retrieve" and s.params["queries"] == "benchmark"]
    assert ranked and all(s.inputs["data"].kind == "dev_split" for s in ranked)  # no test query is ever ranked for it
    plain = cells([("encoder=trained", "reranker=trained", "encoder.train.early_stopping=null",
                     "reranker.train.early_stopping=null")])[0][0]
    assert "dev_split" not in plain.named and "early_stopping" not in plain.named["train_reranker"].params
    assert "dev" not in plain.named["train_reranker"].inputs


def test_pseudo_queries_pretrain_the_reranker_from_the_training_pool(cells):
    cell = cells([("encoder=minilm", "reranker=trained", "reranker.pretrain.epochs=1", "reranker.distill.weight=0.5")])[0][0]
    stage = cell.named["train_reranker"]
    assert stage.inputs["pretrain_pairs"].kind == "pseudo_queries" and stage.params["pretrain"] == {"epochs": 1}
    assert stage.inputs["pretrain_candidates"].inputs["pairs"].kind == "pseudo_queries"
    assert stage.params["distill"] == {"weight": 0.5, "temperature": 0.05}
    assert cell.named["pseudo_queries"].inputs["dev"].kind == "dev_split"  # dev skills stay unseen, as the test's
