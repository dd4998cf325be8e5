"""A cell's retrieve-and-rerank pipeline as a callable: the encoder (or its fine-tuned checkpoint) embeds the
tasks, FAISS finds the top ``retrieve_k`` of the current snapshot, the reranker rescores the top ``topk`` pairs.

Everything is loaded the way the cell's stages load it (the same helpers, the same stage params), so a served
ranking is the ranking the grid scored: ``tests/test_route.py`` compares them to the cell's ``rankings.jsonl``.
A batch of tasks is one encoder call and one reranker call over all their pairs (what micro-batching buys)."""
from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..agents.skill_sets import skill_md
from ..fields import TextSpec
from ..rankings import Ranking
from ..rerank.reorder import rerank_top_k
from ..retrieval.dense import encode
from ..retrieval.index import exact_top_k
from ..stages.data import read_descriptions
from ..stages.graph import BuildContext
from ..stages.reranking import pair_scorer
from ..stages.retrieval import encoder_model, ranked, skill_renderer
from .cell import Cell
from .index import EmbeddingStore, FolderIndex, Snapshot, store_folder

log = logging.getLogger(__name__)
ANSWERS = 4096  # the answers a server keeps for tasks asked again (per index snapshot)


@dataclass(frozen=True)
class Hit:
    """One routed skill: what ``find_skills`` and ``POST /route`` return per skill."""

    id: str
    name: str
    description: str
    score: float
    encoder_rank: int  # 1-based rank the first stage gave it (the reranker may have moved it)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Router:
    """Loads a built cell; ``route(tasks, k)`` ranks the current snapshot for each task."""

    def __init__(self, cell: Cell, skills_dir: Path | None = None):
        self.cell = cell
        ctx = BuildContext(cell.retrieve, cell.cache, Path("."), progress=False)
        self.encoder, self.spec = encoder_model(ctx)
        self.query_text = TextSpec.from_dict(cell.retrieve.params["query_text"])
        self.depth = int(cell.retrieve.params["k"])
        self.lock = threading.Lock()  # one model call at a time (the folder watcher embeds with the same encoder)
        self.answers: OrderedDict[tuple[int, str], list[Hit]] = OrderedDict()  # (snapshot version, task) -> hits
        self.cache_hits = 0
        self.scorer, self.topk = None, 0
        if cell.scores is not None:
            self._load_reranker(BuildContext(cell.scores, cell.cache, Path("."), progress=False))
        pool = cell.retrieve.inputs["pool"]
        self.folder: FolderIndex | None = None
        if skills_dir is None:
            self._snapshot = self._cell_snapshot(ctx)
        else:
            if cell.cfg.fields.mode == "oracle_nd":
                raise ValueError("--skills: fields=oracle_nd renders the cell's own oracle descriptions; a folder has none")
            model = pool.inputs.get("model")
            identity = {"encoder": pool.params["encoder"], "text": pool.params["text"], "model": model.key if model else None}
            render = skill_renderer(pool.params)
            self.folder = FolderIndex(Path(skills_dir), self.embed_documents, render.skill,
                                      EmbeddingStore(store_folder(cell.cache.root, identity)),
                                      int(cell.cfg.data.max_field_chars))

    def _load_reranker(self, ctx: BuildContext) -> None:
        self.scorer, _ = pair_scorer(ctx)  # as score_pairs loads it: fine-tuned weights, ONNX Runtime export
        self.topk = int(self.cell.cfg.topk)
        self.rr_query = TextSpec.from_dict(ctx.params["query_text"])
        self.rr_skill = skill_renderer(ctx.params)
        self.oracle = read_descriptions(ctx)

    @staticmethod
    def _cell_snapshot(ctx: BuildContext) -> Snapshot:
        """The cell's pool as its ``embed_pool`` entry stored it (never re-embedded)."""
        entry = ctx.input("pool")
        ids = json.loads((entry / "ids.json").read_text())
        emb = np.load(entry / "embeddings.npy").astype(np.float32)
        skills = {s.id: s for s in ctx.dataset().skills}
        return Snapshot(ids, emb, {i: skills[i] for i in ids})

    @property
    def snapshot(self) -> Snapshot:
        return self.folder.current if self.folder else self._snapshot

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            return encode(self.encoder, [self.spec.document_prefix + t for t in texts], self.spec.batch_size, False,
                          self.spec.max_tokens, bf16=self.spec.bf16)

    def route(self, tasks: list[str], k: int) -> list[list[Hit]]:
        """The top ``k`` (at most ``retrieve_k``) of the current snapshot for each task. A task asked again of the
        same snapshot is answered from a bounded cache (an index update is a new snapshot, so it never serves a stale
        answer); the others go through the models together."""
        snap = self.snapshot
        if not tasks or not snap.ids:
            return [[] for _ in tasks]
        with self.lock:
            fresh = [t for t in dict.fromkeys(tasks) if (snap.version, t) not in self.answers]
            for task, hits in zip(fresh, self._route(fresh, snap) if fresh else []):
                self.answers[(snap.version, task)] = hits
            self.cache_hits += len(tasks) - len(fresh)
            out = []
            for task in tasks:
                self.answers.move_to_end((snap.version, task))
                out.append(self.answers[(snap.version, task)][:k])
            while len(self.answers) > ANSWERS:
                self.answers.popitem(last=False)
        return out

    def _route(self, tasks: list[str], snap: Snapshot) -> list[list[Hit]]:
        """Every task's ranking (``retrieve_k`` deep): one encoder call, one reranker call over all their pairs."""
        q = encode(self.encoder, [self.query_text.query(t) for t in tasks], self.spec.batch_size, False, self.spec.max_tokens,
                   bf16=self.spec.bf16)
        idx, scores = exact_top_k(snap.embeddings, q, self.depth)
        first = ranked(snap.ids, idx, scores, [str(n) for n in range(len(tasks))])
        final = self._rerank(tasks, first, snap) if self.scorer is not None else first
        out = []
        for r0, r in zip(first, final):
            rank = {i: n + 1 for n, i in enumerate(r0.ids)}
            out.append([Hit(i, snap.skills[i].name, snap.skills[i].description, round(s, 6), rank[i])
                        for i, s in zip(r.ids, r.scores)])
        return out

    def _rerank(self, tasks: list[str], first: list[Ranking], snap: Snapshot) -> list[Ranking]:
        """Every task's top ``topk`` pairs scored in one reranker call, then each head reordered."""
        heads = [r.ids[:self.topk] for r in first]
        queries = [self.rr_query.query(t) for t, h in zip(tasks, heads) for _ in h]
        docs = [self.rr_skill.skill(snap.skills[i], self.oracle) for h in heads for i in h]
        flat = iter(self.scorer.score(queries, docs) if docs else [])
        by_task = [dict(zip(h, [next(flat) for _ in h])) for h in heads]
        return [rerank_top_k(r, r.qid, self.topk, lambda _q, ids, s=s: [s[i] for i in ids]) for r, s in zip(first, by_task)]

    def read_skill(self, skill_id: str) -> str | None:
        """The full SKILL.md of a skill in the index (None for any other id: no request path reaches the disk)."""
        snap = self.snapshot
        skill = snap.skills.get(skill_id)
        if skill is None:
            return None
        path = snap.files.get(skill_id)
        return path.read_text(encoding="utf-8") if path else skill_md(skill, skill.name)

    def describe(self) -> dict[str, Any]:
        """What was loaded: printed at startup and served by ``GET /health``."""
        cell = self.cell
        return {"encoder": cell.cfg.encoder.name, "encoder_weights": _weights(cell.retrieve),
                "reranker": cell.cfg.reranker.name if self.scorer is not None else None,
                "reranker_weights": _weights(cell.scores) if cell.scores is not None else None,
                "topk": self.topk, "retrieve_k": self.depth, "skills": len(self.snapshot.ids),
                "pool": str(self.folder.root) if self.folder else f"embed_pool {cell.retrieve.inputs['pool'].key} (cached)",
                "embedded": self.folder.embedded if self.folder else 0, "answers_cached": len(self.answers),
                "cache_hits": self.cache_hits,
                "skipped": dict(self.folder.errors) if self.folder else {}}


def _weights(stage) -> str:
    model = stage.inputs.get("model") if stage is not None else None
    return f"{model.kind} {model.key}" if model is not None else "base checkpoint"
