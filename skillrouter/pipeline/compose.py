"""A cell's config composed into its stage graph, with no model loaded and no data parsed: the sink is
the cell's scoring, every other node a :class:`~skillrouter.stages.graph.Stage` whose key follows from
the config and the content of the user's files.

    data ─ builtin | release | files | synth:<stage> ─► load_data ─┬─► [train encoder: embed base pool,
                                                                    │    mine (semantic, lexical), train]
                                                                    ├─► embed pool ─► retrieve ─┐
                                                                    └─► [train reranker] ─► score pairs ─► rerank ─► score
    [downstream.tasks_root: per condition, skill sets (none | gold | routed top-k of the ranking) ─► agent trials ─► score]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from ..data import DataError, builtin
from ..data.download import RELEASES, ensure_release
from ..data.releases import READERS
from ..fields import Caps, TextSpec
from ..rerank.spec import RerankerSpec
from ..models import resolve_backend, resolve_precision
from ..retrieval.dense import EncoderSpec
from ..agents.harbor import AgentSpec
from ..agents.skill_sets import condition_label
from ..stages.agents import agent_trials, skill_sets
from ..stages.condense import condense_queries
from ..synth.condense import template as condense_template
from ..stages.data import builtin_data, builtin_file, dev_split, load_data, pseudo_pairs, train_pairs, training_subset
from ..stages.graph import FileRef, Stage, StageFile, walk
from ..stages.reranking import (BACKENDS, ONNX_BACKENDS, export_reranker, fusion_weight, judge_rerank, rerank,
                                score_pairs)
from ..stages.retrieval import embed_pool, export_onnx, retrieve_bm25, retrieve_dense
from ..stages.synthesis import output, synthesis
from ..stages.training import RerankerSignal, encoder_training, mine, reranker_training
from ..synth.prompts import template
from ..train.config import EarlyStopping, EncoderLoss, TrainConfig
from ..train.negatives import NegativeCounts
from . import cascade
from .sweep_configs import plain

SYNTH_PREFIX = "synth:"
SCORING_CODE = ("skillrouter.eval.metrics", "skillrouter.eval.strata")  # what a cell's scoring computes its metrics with
BM25_MINING = {"name": "bm25", "kind": "bm25", "k1": 1.5, "b": 0.75, "stopwords": "en"}


def reference(value: Any) -> str | None:
    """The stage a ``data.*`` value names (``synth:<stage>``), else None."""
    return value[len(SYNTH_PREFIX):] if isinstance(value, str) and value.startswith(SYNTH_PREFIX) else None


def stage_model(section: DictConfig) -> DictConfig:
    """The model config a stage runs: a trained preset's ``base``, else the preset itself."""
    return section.base if section.kind == "trained" else section


def _caps(section: DictConfig, default: DictConfig) -> Caps:
    """A preset's own ``caps`` (a released checkpoint's evaluator budget) win over the global ones."""
    caps = section.caps if "caps" in section else default
    return Caps(description=caps.description, body=caps.body)


def _data_style(cfg: DictConfig) -> str:
    """The text a dataset asks for when a model's preset names none (a release's own text, or ours)."""
    return cfg.data.get("text_style") or "joined"


def encoder_text(cfg: DictConfig) -> TextSpec:
    enc = stage_model(cfg.encoder)
    return TextSpec(mode=cfg.fields.mode, style=enc.get("text_style") or _data_style(cfg), caps=_caps(enc, cfg.caps.encoder),
                    query_cap=enc.query_cap if "query_cap" in enc else cfg.caps.query,
                    query_instruction=enc.get("query_instruction", ""))


def reranker_text(cfg: DictConfig, reranker: DictConfig | None = None) -> TextSpec:
    """How a reranker (the cell's, or a cascade step's ``reranker``) renders skills and queries."""
    rr = stage_model(cfg.reranker if reranker is None else reranker)
    prompt_format = rr.get("prompt_format", "qwen3")
    return TextSpec(mode=cfg.fields.mode, style=_data_style(cfg) if prompt_format == "qwen3" else "skillrouter",
                    caps=_caps(rr, cfg.caps.reranker), query_cap=rr.query_cap if "query_cap" in rr else cfg.caps.query,
                    prompt_format=prompt_format)


def encoder_spec(enc: DictConfig) -> EncoderSpec:
    enc = stage_model(enc)
    return EncoderSpec(model=enc.model, pooling=enc.pooling, max_seq_length=enc.max_seq_length,
                       query_instruction=enc.query_instruction, document_prefix=enc.document_prefix,
                       batch_size=enc.batch_size, padding_side=enc.get("padding_side"),
                       trust_remote_code=enc.get("trust_remote_code", False), backend=resolve_backend(enc.get("backend", "torch")),
                       max_tokens=enc.get("max_tokens"))


def reranker_spec(rr: DictConfig) -> RerankerSpec:
    return RerankerSpec(model=rr.model, head=rr.head, max_length=rr.max_length, instruction=rr.instruction,
                        batch_size=rr.batch_size, prompt_format=rr.get("prompt_format", "qwen3"),
                        body_max_tokens=rr.get("body_max_tokens", 4096), trust_remote_code=rr.get("trust_remote_code", False),
                        query_max_tokens=rr.get("query_max_tokens"), temperature=rr.get("temperature", 0.05))


def _plain(section: DictConfig) -> dict[str, Any]:
    return plain(section)


def train_config(section: DictConfig, seed: int) -> TrainConfig:
    """A ``train`` section as the trainers read it: the cell's seed, ``precision: auto`` resolved for this machine
    (its ``early_stopping`` is :func:`early_stopping`'s)."""
    plain_section = {k: v for k, v in _plain(section).items() if k != "early_stopping"}
    return TrainConfig(**{**plain_section, "seed": seed, "precision": resolve_precision(section.get("precision", "fp32"))})


def early_stopping(section: DictConfig) -> EarlyStopping | None:
    """A trained preset's ``train.early_stopping`` (None: train every epoch of ``train.epochs``)."""
    rule = section.train.get("early_stopping") if section.kind == "trained" else None
    return EarlyStopping(**_plain(rule)) if rule else None


def reranker_negatives(rr: DictConfig, data: Mapping[str, Any]) -> str:
    """``reranker.negatives``, ``auto`` resolved: the papers' lists (``candidates``) where training reads a pool of its
    own (``data.train_pool``: no evaluated skill in it, so none is ever labelled a negative), else ``positives`` (on
    the benchmark's pool, candidates would label the evaluated skills: :mod:`skillrouter.train.reranker`)."""
    mode = str(rr.get("negatives") or "auto")
    if mode != "auto":
        return mode
    return "candidates" if data.get("train_pool") else "positives"


def agent_spec(agent: DictConfig) -> AgentSpec:
    return AgentSpec(name=agent.harbor_name, model=agent.model, kwargs=_plain(agent.kwargs), llm=bool(agent.llm),
                     api_key_env=agent.api_key_env)


SPLITS = ("test", "dev")
QUERY_APPLY = ("retrieve", "rerank", "both")  # query.apply: which stages read the condensed queries


def scored_split(cfg: DictConfig) -> str:
    """``eval.split``: the queries a cell scores, the benchmark's test queries or a dev split."""
    split = str(cfg.eval.get("split", "test"))
    if split not in SPLITS:
        raise DataError("config", None, "eval.split", f"must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def fusion_spec(cfg: DictConfig) -> dict[str, Any]:
    """What ``rerank`` reads of the ``fusion`` group: the method and its one parameter."""
    fusion = cfg.get("fusion") or {"method": "none"}
    method = str(fusion.get("method", "none"))
    return {"method": method, **({"alpha": fusion.alpha if str(fusion.alpha) == "dev" else float(fusion.alpha)}
                                 if method == "interpolate" else {"k": int(fusion.k)} if method == "rrf" else {})}


def fusion_on_dev(cfg: DictConfig) -> bool:
    """``fusion.alpha=dev``: the fusion weight is chosen on the dev split."""
    return fusion_spec(cfg).get("alpha") == "dev"


def holds_out_dev(cfg: DictConfig) -> bool:
    """Whether training leaves the dev split out: when the cell scores it, when (``data.hold_out_dev``) a model tuned
    on it is scored on the test split, when a fusion weight is chosen on it (``fusion.alpha=dev``), or when a training
    stops early on it."""
    return (scored_split(cfg) == "dev" or bool(cfg.data.get("hold_out_dev")) or fusion_on_dev(cfg)
            or any(early_stopping(section) for section in (cfg.encoder, cfg.reranker)))


def _listed(value: Any) -> list[Any]:
    """A config value that may be one item or a list (``downstream.k=10`` or ``downstream.k=[1,10]``)."""
    return list(value) if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else [value]


@dataclass
class CellGraph:
    """One cell: its scoring sink, its stages by the names ``metrics.json`` lists them under, the data
    slice it reads (for ``metrics.json``, so ``rescore`` reloads exactly that), and how it renders text
    (for ``rendered_examples.json``)."""

    sink: Stage
    named: dict[str, Stage]
    data: dict[str, Any]
    texts: dict[str, TextSpec]
    oracle: FileRef | None = None
    pair_groups: dict[str, int] = field(default_factory=dict)  # score_pairs identity (but depth) -> this cell's topk
    cascade: list[tuple[str, int, str, str]] = field(default_factory=list)  # per step: preset, depth, input and output

    def stages(self) -> list[Stage]:
        """Every stage of the cell but its sink, inputs first."""
        return [s for s in walk([self.sink]) if not s.virtual]


class CellComposer:
    """Turns one composed config into its :class:`CellGraph`. ``depths``: per score_pairs identity, how
    deep the grid scores pairs (its deepest ``topk``), so cells that differ in ``topk`` share the scores."""

    def __init__(self, cfg: DictConfig, depths: Mapping[str, int] | None = None):
        self.cfg, self.depths = cfg, depths or {}
        self.named: dict[str, Stage] = {}
        self.pair_groups: dict[str, int] = {}
        self.steps: dict[str, list[tuple[cascade.Step, Stage]]] = {}  # per cascade (its name tag), its steps' rankings
        self.data = self._resolve_data()

    def record(self, name: str, stage: Stage) -> Stage:
        """Name ``stage`` in the cell (``metrics.json`` lists stages by these names); a name is one stage."""
        if self.named.setdefault(name, stage).key != stage.key:
            raise ValueError(f"two stages named {name!r} in one cell")
        return stage

    # -- data --------------------------------------------------------------------------------------
    def _resolve_data(self) -> dict[str, Any]:
        cfg = self.cfg
        data: dict[str, Any] = _plain(cfg.data)
        self.builtin: dict[str, StageFile] = {}
        if data.get("builtin"):
            generated = self.record("builtin_data", builtin_data(data["builtin"]))
            self.builtin = {k: builtin_file(generated, k) for k in builtin.FILES}
            data.update({k: v for k, v in self.builtin.items() if not data.get(k)}, source="files")
        if data.get("source") in RELEASES and not data.get("root"):
            data["root"] = str(ensure_release(data["source"], cfg.data_dir, data.get("revision")))
        training = READERS[data["source"]].training if data.get("source") in READERS else None
        if training:  # a release's own training split, where the user named no other
            data.update({k: v for k, v in training(Path(data["root"]), data).items() if not data.get(k)})
        self.data = data
        for key in ("pool", "queries"):  # SkillBench-Supp replaces the benchmark itself
            if reference(data.get(key)):
                data[key] = self._synth(data[key], self._supp_source)
        if cfg.tier.distractors and reference(data.get("distractors")):
            data["distractors"] = self._synth(data["distractors"], self.benchmark)
        return data

    def _synth(self, value: str, base: Callable[[], Stage]) -> StageFile:
        name = reference(value)
        prompts_dir = self.cfg.synth.get("prompts_dir")
        stage = synthesis(name, _plain(self.cfg.synth), lambda n: template(n, prompts_dir), _plain(self.cfg.llm), base())
        self.record(stage.kind, stage)
        if "embeddings" in stage.inputs:
            self.record("embed_pool_synth", stage.inputs["embeddings"])
        return output(name, stage)

    def _supp_source(self) -> Stage:
        source = _plain(self.cfg.synth.get("source") or {})
        files = {"source": "files", "pool": source.get("pool") or self.builtin.get("pool"),
                 "queries": source.get("queries") or self.builtin.get("queries")}
        return self.record("load_data_supp", load_data(files, "easy", False))

    def base(self) -> Stage:
        """The dataset training and generation read: this cell's data without Hard-tier additions, or its
        ``data.train_pool`` (with the benchmark's queries, which training keeps out of its positives)."""
        return self.record("load_data_base", load_data(self.data, "easy", False, role="train"))

    def benchmark(self) -> Stage:
        """The benchmark without Hard-tier additions: what generation *for the benchmark* reads (distractors and
        Oracle-ND descriptions of its GT skills, which a training pool of its own never holds)."""
        return self.record("load_data_benchmark", load_data(self.data, "easy", False))

    def dataset(self) -> Stage:
        """What the cell scores: the benchmark (``eval.split=test``), or the dev split (its queries, the training pool)."""
        if scored_split(self.cfg) == "dev":
            return self.pairs()
        return self.record("load_data", load_data(self.data, self.cfg.tier.name, bool(self.cfg.tier.distractors)))

    def file(self, key: str) -> FileRef | None:
        """A path-valued input (``train_pairs``, ``oracle_nd``), a generation stage's file if it is a synth reference
        (training pairs generated from the training pool, the rest from the benchmark)."""
        if reference(self.data.get(key)):
            self.data[key] = self._synth(self.data[key], self.base if key == "train_pairs" else self.benchmark)
        return self.data.get(key)

    def oracle(self) -> FileRef | None:
        if self.cfg.fields.mode != "oracle_nd":
            return None
        ref = self.file("oracle_nd")
        if not ref:
            raise DataError("config", None, "data.oracle_nd", "fields=oracle_nd needs a JSONL of {id, description}")
        return ref

    def pairs(self) -> Stage:
        """What training reads: the training pairs, less the dev split when the cell holds one out."""
        cfg = self.cfg
        ref = self.file("train_pairs")
        if not ref:
            what = ("a dev split" if scored_split(cfg) == "dev" else "fusion.alpha=dev (a dev split)" if fusion_on_dev(cfg)
                    else "training")
            raise DataError("config", None, "data.train_pairs", f"{what} needs a pairs JSONL ({{query, skill_id(s)}})")
        pairs = self.record("train_pairs", train_pairs(ref, self.base(), cfg.data.on_error))
        if not holds_out_dev(cfg):
            return pairs
        return self.record("dev_split", dev_split(pairs, self.data.get("dev_queries"), float(cfg.data.dev_share),
                                                  int(cfg.data.dev_seed), cfg.data.on_error, int(cfg.data.max_field_chars),
                                                  str(cfg.data.get("dev_unit", "skill"))))

    # -- retrieval and training --------------------------------------------------------------------
    def _dense_pool(self, spec: EncoderSpec, data: Stage, subset: str, role: str, model: Stage | None
                    ) -> tuple[Stage, Stage | None]:
        onnx_role = role.replace("embed_pool", "export_onnx")
        onnx = self.record(onnx_role, export_onnx(spec, model)) if spec.backend in ONNX_BACKENDS else None
        pool = embed_pool(spec, encoder_text(self.cfg), data, subset, self.oracle(), model, onnx, self.cfg.embed.shards)
        for i, shard in enumerate(pool.after):
            self.record(f"{role}/shard{i}", shard)
        return self.record(role, pool), onnx

    def _retrieval(self, enc: DictConfig, data: Stage, subset: str, queries: str, k: int, pool_role: str,
                   model: Stage | None = None, pairs: Stage | None = None, pool_data: Stage | None = None) -> Stage:
        """Top-k of ``data``'s pool with ``enc`` (BM25 or dense; ``model``: its fine-tuned weights) for the benchmark's
        queries, or the training queries (``pairs``: of that pairs stage, by default the training pairs);
        ``pool_data``: a dataset with the same pool whose embedding to search (a dev split's, the training data's)."""
        text = encoder_text(self.cfg)
        pairs = (pairs or self.pairs()) if queries == "training" else None
        if enc.kind == "bm25":
            return retrieve_bm25(_plain(enc), text, text, data, subset, k, queries, pairs, self.oracle())
        if enc.kind != "dense":
            raise ValueError(f"encoder.kind must be bm25, dense or trained, got {enc.kind!r}")
        spec = encoder_spec(enc)
        pool, onnx = self._dense_pool(spec, pool_data or data, subset, pool_role, model)
        return retrieve_dense(spec, text, pool, data, k, queries, pairs, model, onnx)

    def trained_encoder(self) -> Stage:
        """Mine negatives with the base encoder and BM25 over the training pool, filter them, fine-tune."""
        cfg, enc = self.cfg, self.cfg.encoder
        if enc.base.kind != "dense":
            raise ValueError("encoder=trained needs a dense encoder.base")
        base, pairs, text, spec = self.base(), self.pairs(), encoder_text(cfg), encoder_spec(enc.base)
        subset, depth = training_subset(base), enc.negatives.depth
        base_pool, onnx = self._dense_pool(spec, base, subset, "embed_pool_base", None)
        semantic = self.record("mine_semantic", retrieve_dense(spec, text, base_pool, base, depth, "training", pairs,
                                                               onnx=onnx))
        lexical_query = TextSpec(mode=cfg.fields.mode, query_cap=text.query_cap)
        lexical = self.record("mine_lexical", retrieve_bm25(BM25_MINING, text, lexical_query, base, subset, depth,
                                                            "training", pairs, self.oracle()))
        negatives = self.record("mine_negatives", mine(NegativeCounts(**enc.negatives), _plain(cfg.fn_filter), cfg.seed,
                                                       base, pairs, semantic, lexical, base_pool))
        early = early_stopping(enc)
        training = encoder_training(spec, EncoderLoss(**enc.loss), train_config(enc.train, cfg.seed), text, text,
                                    base, pairs, negatives, self.oracle(), pairs if early else None, early,
                                    str(cfg.objective))
        return self.record("train_encoder", training)

    def encoder(self) -> tuple[DictConfig, Stage | None]:
        """The cell's first-stage encoder config and its fine-tuned weights (None: used as it is)."""
        if self.cfg.encoder.kind == "trained":
            return self.cfg.encoder.base, self.named.get("train_encoder") or self.trained_encoder()
        return self.cfg.encoder, None

    # -- reranking ---------------------------------------------------------------------------------
    def reranked(self, retrieval: Stage, dataset: Stage) -> Stage:
        """The rerank stages after retrieval: the configured reranker at ``topk`` (fine-tuned first if asked), or the
        ``cascade``'s steps (:mod:`.cascade`), each on the top of the ranking before it; ``fusion`` on the last step."""
        cfg = self.cfg
        if cfg.get("cascade"):
            return self._cascade(cascade.steps(cfg.cascade), retrieval, dataset, fusion_spec(cfg))
        return self._step(cfg.reranker, cfg.topk, retrieval, dataset, "", fusion_spec(cfg), self.dev_retrieval)

    def _cascade(self, steps: list[cascade.Step], ranking: Stage, dataset: Stage, fusion: dict[str, Any],
                 tag: str = "") -> Stage:
        """Each step reorders the top of the ranking before it; names carry the step (``score_pairs@2``)."""
        for n, step in enumerate(steps, 1):
            last = n == len(steps)
            dev_input = (lambda n=n: self._cascade(steps[:n - 1], self.dev_retrieval(), self.pairs(), {"method": "none"},
                                                   "_dev") if n > 1 else self.dev_retrieval())
            ranking = self._step(cascade.preset(step.preset, self.cfg), step.depth, ranking, dataset, f"{tag}@{n}",
                                 fusion if last else {"method": "none"}, dev_input)
            self.steps.setdefault(tag, []).append((step, ranking))
        return ranking

    def _step(self, rr: DictConfig, k: int, ranking: Stage, dataset: Stage, tag: str, fusion: dict[str, Any],
              dev_input: Callable[[], Stage]) -> Stage:
        """One rerank step: ``ranking``'s top ``k`` reordered by ``rr`` (an LLM's pick, or a pointwise reranker's scores
        fused with the ranking's own as ``fusion`` says; ``dev_input``: the step's input on the dev split, where
        ``fusion.alpha=dev`` chooses the weight). ``tag`` ends its stages' names (none: the one-stage cell's names)."""
        cfg, text = self.cfg, reranker_text(self.cfg, rr)
        if rr.kind == "llm_judge":
            if fusion["method"] != "none":
                raise ValueError("fusion needs a pointwise reranker's scores; reranker=llm_judge picks, it does not score")
            return self.record("rerank" + tag, judge_rerank(self._judge(rr), k, text, text, ranking, dataset, self.oracle()))
        model = self._trained_reranker(rr, text, tag) if rr.kind == "trained" else None
        spec, trained = reranker_spec(stage_model(rr)), rr.kind == "trained"
        backend = resolve_backend(str(rr.get("backend") or "torch"))
        if backend not in BACKENDS:
            raise ValueError(f"reranker.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        onnx = self.record("export_reranker" + tag, export_reranker(spec, backend, model)) if backend in ONNX_BACKENDS else None
        run = (onnx, backend)
        depth = k
        if not tag:  # one step: the grid scores each query's pairs once, to its deepest topk
            identity = score_pairs(spec, trained, 0, text, text, ranking, dataset, model, self.oracle(), *run).key
            self.pair_groups[identity] = k
            depth = max(self.depths.get(identity, k), k)
        scores = self.record("score_pairs" + tag, score_pairs(spec, trained, depth, text, text, ranking, dataset, model,
                                                              self.oracle(), *run))
        weight = None
        if fusion.get("alpha") == "dev":
            dev, dev_ranking = self.pairs(), dev_input()
            dev_scores = self.record("score_pairs_dev" + tag, score_pairs(spec, trained, k, text, text, dev_ranking, dev,
                                                                          model, self.oracle(), *run))
            weight = self.record("fusion_weight" + tag, fusion_weight(k, str(cfg.objective), dev_ranking, dev_scores, dev))
        return self.record("rerank" + tag, rerank(k, scores, ranking, fusion, weight))

    def _judge(self, rr: DictConfig) -> dict[str, Any]:
        """The LLM a selection step asks: the ``llm`` group's (``llm=stub|vllm|openai``) when one is chosen, else the
        ``llm_judge`` preset's own endpoint."""
        judge, llm = _plain(rr), self.cfg.llm
        if str(llm.get("name", "none")) == "none":
            return judge
        return {**judge, "url": llm.url, "model": llm.model, "api_key_env": llm.api_key_env, "timeout": llm.timeout}

    def _trained_reranker(self, rr: DictConfig, text: TextSpec, tag: str) -> Stage:
        """``rr`` fine-tuned on lists from the first stage's candidates of the training queries."""
        cfg, base, (enc, enc_model) = self.cfg, self.base(), self.encoder()
        candidates = self.record("reranker_candidates" + tag, self._retrieval(
            enc, base, training_subset(base), "training", rr.candidates, "embed_pool_train", enc_model))
        return self.record("train_reranker" + tag, reranker_training(
            reranker_spec(rr.base), _plain(cfg.loss), train_config(rr.train, cfg.seed), rr.list_size,
            reranker_negatives(rr, self.data), text,
            base, self.pairs(), candidates, self.oracle(), self._reranker_signal(rr, enc, enc_model, text, tag)))

    def _reranker_signal(self, rr: DictConfig, enc: DictConfig, enc_model: Stage | None, text: TextSpec, tag: str = ""
                         ) -> RerankerSignal:
        """What the trained reranker learns from beyond its labelled lists (``reranker.pretrain``, ``reranker.distill``)
        and the dev split it stops early on (``reranker.train.early_stopping``)."""
        cfg = self.cfg
        early, base = early_stopping(rr), self.base()
        pretrain = _plain(rr.get("pretrain") or {})
        pseudo = candidates = None
        if pretrain.get("epochs"):
            pseudo = self.record("pseudo_queries" + tag, pseudo_pairs(base, pretrain["sources"], int(pretrain["body_lines"]),
                                                                 int(pretrain["max_chars"]),
                                                                 self.pairs() if holds_out_dev(cfg) else None))
            candidates = self.record("reranker_pretrain_candidates" + tag, self._retrieval(
                enc, base, training_subset(base), "training", rr.candidates, "embed_pool_train", enc_model, pseudo))
        return RerankerSignal(self.pairs() if early else None, self.dev_retrieval() if early else None, early,
                              str(cfg.objective), text, pseudo, candidates, {"epochs": int(pretrain.get("epochs", 0))},
                              _plain(rr.get("distill") or {}))

    def dev_retrieval(self) -> Stage:
        """The dev split's queries retrieved by the cell's first stage from the training pool (the training data's
        embedding of it: the dev split holds the same skills)."""
        enc, enc_model = self.encoder()
        return self.record("retrieve_dev", self._retrieval(enc, self.pairs(), "all", "benchmark", self.cfg.retrieve_k,
                                                           "embed_pool_dev", enc_model, pool_data=self.base()))

    # -- downstream --------------------------------------------------------------------------------
    def _pool_tree(self) -> str | None:
        """The pool's SKILL.md tree, when the pool was read from one (its folders are copied whole)."""
        pool, fmt = self.data.get("pool"), self.data.get("pool_format") or "auto"
        if isinstance(pool, str) and (fmt == "tree" or (fmt == "auto" and Path(pool).is_dir())):
            return str(Path(pool).resolve())
        return None

    def downstream(self, rankings: Stage, dataset: Stage) -> dict[str, Stage]:
        """Per condition (``none``, ``gold``, ``routed@k``), the agent trials on the task tree."""
        cfg, ds = self.cfg, self.cfg.downstream
        root = str(Path(ds.tasks_root).expanduser().resolve())
        tasks = [str(t) for t in _listed(ds.tasks)] if ds.tasks else None
        agent = agent_spec(cfg.agent)
        run = {"harbor": ds.harbor, "concurrency": int(ds.concurrency), "retries": int(ds.retries)}
        out = {}
        for condition in _listed(ds.skills):
            for k in (_listed(ds.k) if condition == "routed" else [None]):
                label = condition_label(condition, k)
                sets = self.record(f"skill_sets/{label}", skill_sets(
                    condition, k, root, tasks, bool(ds.verifier_reading), dataset, rankings, self._pool_tree()))
                out[label] = self.record(f"agent_trials/{label}", agent_trials(
                    sets, agent, int(ds.trials), ds.environment, float(ds.timeout_multiplier), run, cfg.llm.get("url")))
        return out

    # -- the cell ----------------------------------------------------------------------------------
    def condensed(self, dataset: Stage, role: str) -> Stage:
        """``dataset`` as the ``role`` stage (``retrieve`` or ``rerank``) reads its queries: condensed where
        ``query.apply`` names the role (:mod:`skillrouter.stages.condense`), else as they are."""
        query = self.cfg.get("query") or {"method": "raw", "apply": "rerank"}
        if query["apply"] not in QUERY_APPLY:
            raise DataError("config", None, "query.apply", f"must be one of {', '.join(QUERY_APPLY)}, got {query['apply']!r}")
        if query["method"] == "raw" or query["apply"] not in (role, "both"):
            return dataset
        prompt = condense_template(str(query["prompt"])) if query["method"] == "llm" else None
        return self.record("condense", condense_queries(dataset, _plain(query), _plain(self.cfg.llm), prompt))

    def graph(self) -> CellGraph:
        cfg = self.cfg
        dataset = self.dataset()
        enc, model = self.encoder()
        retrieval = self.record("retrieve", self._retrieval(enc, self.condensed(dataset, "retrieve"), "all", "benchmark",
                                                            cfg.retrieve_k, "embed_pool", model))
        rankings = retrieval if cfg.reranker.kind == "none" and not cfg.get("cascade") else \
            self.reranked(retrieval, self.condensed(dataset, "rerank"))
        extras = {name: self.named[name] for name in ("train_pairs", "dev_split", "mine_negatives") if name in self.named}
        extras.update({f"synth:{s.kind}": s for s in self.named.values() if s.resource == "llm" and s.kind != "rerank"})
        if cfg.downstream.tasks_root:
            extras.update({f"downstream:{label}": s for label, s in self.downstream(rankings, dataset).items()})
        sink = Stage("score", None, {"eval": {"metrics": list(cfg.eval.metrics), "breakdown": list(cfg.eval.breakdown)}},
                     inputs={"rankings": rankings, "data": dataset, **extras}, cheap=True, code=SCORING_CODE)
        steps = self.steps.get("", [])
        names = {stage.key: name for name, stage in self.named.items()}
        chain = [("retrieve", retrieval), *[(names[r.key], r) for _, r in steps]]
        return CellGraph(sink=sink, named=dict(self.named), data=self.data,
                         texts={"encoder": encoder_text(cfg), "reranker": reranker_text(cfg)},
                         oracle=self.oracle(), pair_groups=self.pair_groups,
                         cascade=[(step.preset, step.depth, chain[n][0], chain[n + 1][0]) for n, (step, _) in enumerate(steps)])


def compose_cell(cfg: DictConfig, depths: Mapping[str, int] | None = None) -> CellGraph:
    return CellComposer(cfg, depths).graph()
