"""Synthesis stages: files an LLM generates from a cell's data (``data.*=synth:<stage>``), each built
once and shared by every cell that agrees on its inputs, prompts and LLM settings.

Each stage logs every LLM request and answer in its work folder (``requests.jsonl``), so a killed stage
resumes without asking again; the log is published with the artifact. The server's URL and the API
key are not part of the key (nor written anywhere): the model, temperature, seed and prompts are.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, Mapping

import numpy as np

from ..data.jsonl import atomic_write_json, atomic_write_jsonl
from ..data.types import Dataset, Skill
from ..fields import Caps, TextSpec, render_skill
from ..retrieval.bm25 import bm25_search
from ..retrieval.dense import EncoderSpec
from ..synth import client as client_module, prompts as prompts_module, r3 as r3_module, skillrouter as sr_module
from ..synth.client import URL_ENV, LLMClient, LLMConfig
from .. import events
from .graph import BuildContext, Stage, StageFile
from .retrieval import embed_pool

OUTPUT = {"gen_queries": "pairs.jsonl", "gen_distractors": "distractors.jsonl", "oracle_nd": "oracle_nd.jsonl",
          "gen_eval_queries": "queries.jsonl", "dedupe_equivalent": "pool.jsonl", "r3_pairs": "pairs.jsonl",
          "r3_test": "test.jsonl"}
STAGE_OF = {"gen_eval_queries": "supp", "dedupe_equivalent": "supp", "r3_test": "r3_pairs"}  # two files, one stage
CODE = tuple(m.__name__ for m in (client_module, prompts_module, sr_module, r3_module))
NEIGHBOUR_TEXT = Caps(300, 2500)  # the paper's encoder budget: the text the stages' BM25 and clustering read
LLM_IDENTITY = ("model", "temperature", "seed", "max_tokens")  # what of the LLM defines its output
LLM_EXECUTION = ("url", "api_key_env", "concurrency", "retries", "timeout", "backoff", "budget")
SAMPLE_ROWS, SAMPLE_CHARS = 20, 1000  # what of each generated file the stage's run shows


def _neighbour_text(skill: Skill) -> str:
    return render_skill(skill, "all", NEIGHBOUR_TEXT)


def llm_config(llm: Mapping[str, Any]) -> LLMConfig:
    """The client's settings; a grid's own server (``llm=stub|vllm``) is found through the environment."""
    return LLMConfig(**{k: llm[k] for k in (*LLM_IDENTITY, *LLM_EXECUTION)} | {"url": llm["url"] or os.environ.get(URL_ENV)})


def _gt_skills(dataset: Dataset) -> list[Skill]:
    by_id = {s.id: s for s in dataset.skills}
    return [by_id[g] for g in dict.fromkeys(g for q in dataset.queries for g in q.gt) if g in by_id]


Produce = Callable[[LLMClient], tuple[dict[str, list[dict]], dict[str, Any]]]


def _run(ctx: BuildContext, produce: Produce) -> dict[str, Any]:
    client = LLMClient(llm_config(ctx.stage.options["llm"]), ctx.work / "requests.jsonl")
    files, report = produce(client)
    for name, records in files.items():
        atomic_write_jsonl(ctx.out / name, records)
    usage = vars(client.usage)
    atomic_write_json(ctx.out / "report.json", {"report": report, "usage": usage})
    if (ctx.work / "requests.jsonl").exists():
        shutil.copy(ctx.work / "requests.jsonl", ctx.out / "requests.jsonl")
    _report_to_run(files, report, usage)
    return {"report": report, "usage": usage, "items": usage["requests"]}


def _flat(prefix: str, obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return {k: v for key, value in obj.items() for k, v in _flat(f"{prefix}/{key}", value).items()}
    return {prefix: obj} if isinstance(obj, (int, float, str, bool)) or obj is None else {}


def _report_to_run(files: Mapping[str, list[dict]], report: Mapping[str, Any], usage: Mapping[str, Any]) -> None:
    """The stage's counters (requests, retries, failures, tokens; the report's filter drops) and a sample of
    every generated file, for the stage's W&B run."""
    events.log_summary({**_flat("usage", usage), **_flat("report", report)})
    rows = [[name, i, json.dumps(record, ensure_ascii=False)[:SAMPLE_CHARS]]
            for name, records in files.items() for i, record in enumerate(records[:SAMPLE_ROWS])]
    events.log_table("generated", ["file", "row", "record"], rows)


def _one_file(ctx: BuildContext, make: Callable[[LLMClient], tuple[list[dict], dict[str, Any]]]) -> dict[str, Any]:
    def produce(client: LLMClient) -> tuple[dict[str, list[dict]], dict[str, Any]]:
        records, report = make(client)
        return {OUTPUT[ctx.stage.kind]: records}, report

    return _run(ctx, produce)


def _conf(ctx: BuildContext) -> dict[str, Any]:
    return {k: v for k, v in ctx.params.items() if k not in ("llm", "prompt", "prompts")}


def _build_gen_queries(ctx: BuildContext) -> dict[str, Any]:
    ds = ctx.dataset()
    labelled = {g for q in ds.queries for g in q.all_gt}
    return _one_file(ctx, lambda c: sr_module.gen_queries(c, ds.training_pool(), labelled, _conf(ctx), ctx.params["prompt"]))


def _build_gen_distractors(ctx: BuildContext) -> dict[str, Any]:
    gt = _gt_skills(ctx.dataset())
    return _one_file(ctx, lambda c: sr_module.gen_distractors(c, gt, _conf(ctx), ctx.params["prompts"]))


def _build_oracle_nd(ctx: BuildContext) -> dict[str, Any]:
    gt = _gt_skills(ctx.dataset())
    return _one_file(ctx, lambda c: sr_module.oracle_nd(c, gt, _conf(ctx), ctx.params["prompt"]))


def _build_supp(ctx: BuildContext) -> dict[str, Any]:
    """SkillBench-Supp: held-out queries for the GT skills and the pool without their equivalents
    (one stage: the two files belong together)."""
    ds, prompts = ctx.dataset(), ctx.params["prompts"]
    gt = _gt_skills(ds)

    def produce(c: LLMClient) -> tuple[dict[str, list[dict]], dict[str, Any]]:
        queries, q_report = sr_module.gen_eval_queries(c, gt, _conf(ctx), prompts["gen_eval_queries"])
        text_of = {s.id: _neighbour_text(s) for s in ds.skills}
        idx, _ = bm25_search(list(text_of.values()), [text_of[g.id] for g in gt], 6, show_progress=False)
        neighbours = [[ds.skills[j].id for j in row if ds.skills[j].id != g.id][:5] for g, row in zip(gt, idx)]
        pool, p_report = sr_module.dedupe_equivalent(c, ds.skills, gt, neighbours, prompts["equivalent"])
        return ({OUTPUT["gen_eval_queries"]: queries, OUTPUT["dedupe_equivalent"]: pool},
                {"queries": q_report, "dedupe": p_report})

    return _run(ctx, produce)


def _build_r3(ctx: BuildContext) -> dict[str, Any]:
    params, pool = ctx.params, ctx.dataset().training_pool()
    ids = json.loads((ctx.input("embeddings") / "ids.json").read_text())
    emb = np.load(ctx.input("embeddings") / "embeddings.npy").astype(np.float32)

    def produce(c: LLMClient) -> tuple[dict[str, list[dict]], dict[str, Any]]:
        sub, sup, c_report = r3_module.cluster(emb, params["n_sub"], params["n_super"], params["seed"])
        sets = r3_module.sample_sets(ids, sub, sup, {int(k): v for k, v in params["sets"].items()}, params["seed"])
        records, j_report = r3_module.write_or_skip(c, {s.id: s for s in pool}, sets, params["prompt"], params["seed"])
        train, test, s_report = r3_module.split_pairs(records, ids, params["test_fraction"], params["seed"])
        return ({OUTPUT["r3_pairs"]: train, OUTPUT["r3_test"]: test, "judgements.jsonl": records},
                {"clusters": c_report, "judgements": j_report, "split": s_report})

    return _run(ctx, produce)


def _stage(name: str, build: Callable[[BuildContext], dict[str, Any]], params: Mapping[str, Any],
           inputs: Mapping[str, Stage], llm: Mapping[str, Any]) -> Stage:
    return Stage(name, build, {**params, "llm": {k: llm[k] for k in LLM_IDENTITY}}, inputs=inputs, resource="llm", resumable=True,
                 options={"llm": {k: llm[k] for k in (*LLM_IDENTITY, *LLM_EXECUTION)}}, code=CODE)


def synthesis(name: str, synth: Mapping[str, Any], prompt: Callable[[str], str], llm: Mapping[str, Any],
              base: Stage) -> Stage:
    """The stage behind ``synth:<name>`` (``gen_eval_queries`` and ``dedupe_equivalent`` are one stage,
    ``supp``, as are ``r3_pairs`` and ``r3_test``), made from the ``base`` dataset."""
    stage = STAGE_OF.get(name, name)
    if stage == "gen_queries":
        return _stage(stage, _build_gen_queries, {**synth["gen_queries"], "prompt": prompt("gen_queries")},
                      {"data": base}, llm)
    if stage == "gen_distractors":
        return _stage(stage, _build_gen_distractors, {**synth["gen_distractors"], "prompts": {
            n: prompt(n) for n in ("gen_distractors", "degrade")}}, {"data": base}, llm)
    if stage == "oracle_nd":
        return _stage(stage, _build_oracle_nd, {**synth["oracle_nd"], "prompt": prompt("oracle_nd")}, {"data": base}, llm)
    if stage == "supp":
        return _stage(stage, _build_supp, {**synth["supp"], "prompts": {
            n: prompt(n) for n in ("gen_eval_queries", "equivalent")}}, {"data": base}, llm)
    if stage == "r3_pairs":
        params = synth["r3"]
        emb = embed_pool(EncoderSpec(model=params["encoder"]), TextSpec(mode="all", caps=NEIGHBOUR_TEXT), base, "training")
        return _stage(stage, _build_r3, {**params, "prompt": prompt("write_or_skip")}, {"data": base, "embeddings": emb},
                      llm)
    raise ValueError(f"unknown synthesis stage {name!r}: one of {', '.join(sorted(OUTPUT))}")


def output(name: str, stage: Stage) -> StageFile:
    """The file ``synth:<name>`` stands for."""
    return StageFile(stage, OUTPUT[name])
