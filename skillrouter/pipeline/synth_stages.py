"""Synthesis stages in the grid: a ``data.*`` value ``synth:<stage>`` names a generated file, built once
through the stage cache and shared by every cell that agrees on its inputs, prompts and LLM settings.

Each stage logs every LLM request and answer under ``<cache>/<stage>/<key>.work/requests.jsonl``, so a
killed stage resumes without asking again; the log is published with the artifact. The server URL and
the API key are not part of the key (nor written anywhere): the model, temperature, seed and prompts are.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ..data.jsonl import atomic_write_json, atomic_write_jsonl
from ..data.types import Dataset, Skill
from ..fields import Caps, render_skill
from ..retrieval.bm25 import bm25_search
from ..retrieval.dense import EncoderSpec
from ..synth import client as client_module, prompts as prompts_module, r3 as r3_module, skillrouter as sr_module
from ..synth.client import LLMClient, LLMConfig
from ..synth.prompts import template
from . import stages
from .cache import StageCache, StageRecord, texts_fingerprint

PREFIX = "synth:"
OUTPUT = {"gen_queries": "pairs.jsonl", "gen_distractors": "distractors.jsonl", "oracle_nd": "oracle_nd.jsonl",
          "gen_eval_queries": "queries.jsonl", "dedupe_equivalent": "pool.jsonl", "r3_pairs": "pairs.jsonl",
          "r3_test": "test.jsonl"}
CODE = [client_module, prompts_module, sr_module, r3_module]
NEIGHBOUR_TEXT = Caps(300, 2500)  # the paper's encoder budget: the text the stages' BM25 and clustering read


def _neighbour_text(skill: Skill) -> str:
    return render_skill(skill, "all", NEIGHBOUR_TEXT)


def reference(value: Any) -> str | None:
    """The stage a ``data.*`` value names (``synth:<stage>``), else None."""
    return value[len(PREFIX):] if isinstance(value, str) and value.startswith(PREFIX) else None


def llm_config(cfg: DictConfig) -> LLMConfig:
    llm = cfg.llm
    return LLMConfig(url=llm.url, model=llm.model, api_key_env=llm.api_key_env, concurrency=llm.concurrency,
                     retries=llm.retries, timeout=llm.timeout, backoff=llm.backoff, budget=llm.budget,
                     temperature=llm.temperature, seed=llm.seed, max_tokens=llm.max_tokens)


def _identity(cfg: DictConfig) -> dict[str, Any]:
    """What of the LLM defines its output (never the URL or the key)."""
    llm = cfg.llm
    return {"model": llm.model, "temperature": llm.temperature, "seed": llm.seed, "max_tokens": llm.max_tokens}


class Synthesizer:
    """Builds (or reuses) the synthesis artifacts one cell asks for, and keeps their reports."""

    def __init__(self, cfg: DictConfig, cache: StageCache, user: str, record: Callable[[str, StageRecord], StageRecord]):
        self.cfg, self.cache, self.user, self.record = cfg, cache, user, record
        self.reports: dict[str, dict[str, Any]] = {}

    def _prompt(self, name: str) -> str:
        return template(name, self.cfg.synth.get("prompts_dir"))

    def _run(self, stage: str, params: dict[str, Any], inputs: list[str],
             produce: Callable[[LLMClient], tuple[dict[str, list[dict]], dict[str, Any]]]) -> Path:
        params = {**params, "llm": _identity(self.cfg)}

        def build(out: Path, work: Path) -> dict[str, Any]:
            client = LLMClient(llm_config(self.cfg), work / "requests.jsonl")
            files, report = produce(client)
            for name, records in files.items():
                atomic_write_jsonl(out / name, records)
            usage = vars(client.usage)
            atomic_write_json(out / "report.json", {"report": report, "usage": usage})
            if (work / "requests.jsonl").exists():
                shutil.copy(work / "requests.jsonl", out / "requests.jsonl")
            return {"report": report, "usage": usage}

        rec = self.record(stage, self.cache.get_or_build_resumable(stage, params, inputs, build, code=CODE, user=self.user))
        manifest = json.loads((Path(rec.path) / "manifest.json").read_text())
        self.reports[stage] = {"key": rec.key, "cached": rec.cached, **manifest["report"], "usage": manifest["usage"]}
        return Path(rec.path)

    def _single(self, stage: str, params: dict[str, Any], inputs: list[str],
                make: Callable[[LLMClient], tuple[list[dict], dict[str, Any]]]) -> Path:
        def produce(client: LLMClient) -> tuple[dict[str, list[dict]], dict[str, Any]]:
            records, report = make(client)
            return {OUTPUT[stage]: records}, report

        return self._run(stage, params, inputs, produce)

    def path(self, value: str, base: Callable[[], Dataset]) -> str:
        """The file a ``synth:<stage>`` reference stands for; ``base()`` gives the dataset it is made from."""
        stage = reference(value)
        makers = {"gen_queries": self.gen_queries, "gen_distractors": self.gen_distractors, "oracle_nd": self.oracle_nd,
                  "gen_eval_queries": self.supp, "dedupe_equivalent": self.supp, "r3_pairs": self.r3, "r3_test": self.r3}
        if stage not in makers:
            raise ValueError(f"unknown synthesis stage {stage!r}: one of {', '.join(sorted(makers))}")
        return str(makers[stage](base) / OUTPUT[stage])

    @staticmethod
    def _fingerprint(dataset: Dataset) -> str:
        return texts_fingerprint([json.dumps([s.id, s.name, s.description, s.body, s.category]) for s in dataset.skills]
                                 + [json.dumps([q.id, q.text, q.gt]) for q in dataset.queries])

    @staticmethod
    def _gt_skills(dataset: Dataset) -> list[Skill]:
        by_id = {s.id: s for s in dataset.skills}
        return [by_id[g] for g in dict.fromkeys(g for q in dataset.queries for g in q.gt) if g in by_id]

    def gen_queries(self, base: Callable[[], Dataset]) -> Path:
        ds, params = base(), OmegaConf.to_container(self.cfg.synth.gen_queries)
        prompt = self._prompt("gen_queries")
        labelled = {g for q in ds.queries for g in q.all_gt}
        return self._single("gen_queries", {**params, "prompt": prompt}, [self._fingerprint(ds)],
                            lambda c: sr_module.gen_queries(c, ds.training_pool(), labelled, params, prompt))

    def gen_distractors(self, base: Callable[[], Dataset]) -> Path:
        ds, params = base(), OmegaConf.to_container(self.cfg.synth.gen_distractors)
        prompts = {n: self._prompt(n) for n in ("gen_distractors", "degrade")}
        return self._single("gen_distractors", {**params, "prompts": prompts}, [self._fingerprint(ds)],
                            lambda c: sr_module.gen_distractors(c, self._gt_skills(ds), params, prompts))

    def oracle_nd(self, base: Callable[[], Dataset]) -> Path:
        ds, params = base(), OmegaConf.to_container(self.cfg.synth.oracle_nd)
        prompt = self._prompt("oracle_nd")
        return self._single("oracle_nd", {**params, "prompt": prompt}, [self._fingerprint(ds)],
                            lambda c: sr_module.oracle_nd(c, self._gt_skills(ds), params, prompt))

    def supp(self, base: Callable[[], Dataset]) -> Path:
        """SkillBench-Supp: held-out queries for the GT skills and the pool without their equivalents
        (one stage: the two files belong together)."""
        ds, params = base(), OmegaConf.to_container(self.cfg.synth.supp)
        prompts = {n: self._prompt(n) for n in ("gen_eval_queries", "equivalent")}

        def produce(c: LLMClient):
            gt = self._gt_skills(ds)
            queries, q_report = sr_module.gen_eval_queries(c, gt, params, prompts["gen_eval_queries"])
            text_of = {s.id: _neighbour_text(s) for s in ds.skills}
            idx, _ = bm25_search(list(text_of.values()), [text_of[g.id] for g in gt], 6, show_progress=False)
            neighbours = [[ds.skills[j].id for j in row if ds.skills[j].id != g.id][:5] for g, row in zip(gt, idx)]
            pool, p_report = sr_module.dedupe_equivalent(c, ds.skills, gt, neighbours, prompts["equivalent"])
            return {OUTPUT["gen_eval_queries"]: queries, OUTPUT["dedupe_equivalent"]: pool}, {"queries": q_report,
                                                                                              "dedupe": p_report}

        return self._run("supp", {**params, "prompts": prompts}, [self._fingerprint(ds)], produce)

    def r3(self, base: Callable[[], Dataset]) -> Path:
        ds, params = base(), OmegaConf.to_container(self.cfg.synth.r3)
        prompt = self._prompt("write_or_skip")
        pool = ds.training_pool()
        ids, texts = [s.id for s in pool], [_neighbour_text(s) for s in pool]
        emb_rec = stages.embed_pool(self.cache, EncoderSpec(model=params["encoder"]), texts, ids, self.user, progress=False)
        self.record("embed_pool_synth", emb_rec)

        def produce(c: LLMClient):
            import numpy as np

            emb = np.load(Path(emb_rec.path) / "embeddings.npy").astype(np.float32)
            sub, sup, c_report = r3_module.cluster(emb, params["n_sub"], params["n_super"], params["seed"])
            sets = r3_module.sample_sets(ids, sub, sup, {int(k): v for k, v in params["sets"].items()}, params["seed"])
            records, j_report = r3_module.write_or_skip(c, {s.id: s for s in pool}, sets, prompt, params["seed"])
            train, test, s_report = r3_module.split_pairs(records, ids, params["test_fraction"], params["seed"])
            return ({OUTPUT["r3_pairs"]: train, OUTPUT["r3_test"]: test, "judgements.jsonl": records},
                    {"clusters": c_report, "judgements": j_report, "split": s_report})

        return self._run("r3_pairs", {**params, "prompt": prompt}, [self._fingerprint(ds), emb_rec.key], produce)
