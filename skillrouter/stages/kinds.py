"""Every stage kind, with the config keys whose values can change its artifact and the cells that have it.

The table a plan reads to say why an override changes nothing in a grid (no stage of the grid reads
it) and what would make it count (the options under which a stage that reads it runs)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    reads: tuple[str, ...]
    runs_with: str


_SYNTH = Kind(("synth", "llm", "data"), "a synth=... option")
KINDS: dict[str, Kind] = {
    "builtin_data": Kind(("data.builtin",), "data=builtin|tiny"),
    "load_data": Kind(("data", "tier"), "every cell"),
    "train_pairs": Kind(("data.train_pairs", "data.on_error"), "a trained encoder or reranker"),
    "pseudo_queries": Kind(("reranker.pretrain",), "reranker=trained reranker.pretrain.epochs > 0"),
    "dev_split": Kind(("data.dev_queries", "data.dev_share", "data.dev_seed", "data.dev_unit", "data.hold_out_dev",
                       "eval.split", "fusion.alpha"), "eval.split=dev, data.hold_out_dev=true or fusion.alpha=dev"),
    "embed_pool": Kind(("encoder", "fields", "caps"), "a dense encoder"),
    "embed_shard": Kind(("encoder", "fields", "caps", "embed.shards"), "embed.shards > 1"),
    "export_onnx": Kind(("encoder.backend",), "encoder.backend=onnx|onnx-int8"),
    "export_reranker": Kind(("reranker",), "reranker.backend=onnx|onnx-int8"),
    "retrieve": Kind(("encoder", "fields", "caps", "retrieve_k"), "every cell"),
    "mine_negatives": Kind(("encoder.negatives", "fn_filter", "seed"), "encoder=trained*"),
    "train_encoder": Kind(("encoder", "fields", "caps", "seed", "objective"), "encoder=trained*"),
    "train_reranker": Kind(("reranker", "loss", "fields", "caps", "seed", "objective"), "reranker=trained"),
    "score_pairs": Kind(("reranker", "fields", "caps", "topk", "cascade"), "a reranker other than none, or a cascade"),
    "rerank": Kind(("reranker", "topk", "fusion", "cascade", "llm"), "a reranker other than none, or a cascade"),
    "fusion_weight": Kind(("fusion", "objective", "topk", "data.dev_queries", "data.dev_share", "data.dev_seed",
                           "data.dev_unit"),
                          "fusion=interpolate fusion.alpha=dev"),
    "gen_queries": _SYNTH,
    "gen_distractors": _SYNTH,
    "oracle_nd": _SYNTH,
    "supp": _SYNTH,
    "r3_pairs": _SYNTH,
    "skill_sets": Kind(("downstream.tasks_root", "downstream.tasks", "downstream.skills", "downstream.k",
                        "downstream.verifier_reading"), "downstream.tasks_root"),
    "agent_trials": Kind(("downstream", "agent", "llm.model"), "downstream.tasks_root"),
    "condense": Kind(("query", "llm"), "query=head|keywords|llm"),
    "score": Kind(("eval",), "every cell"),
}


def reads(kind: str, key: str) -> bool:
    """Whether stages of ``kind`` read the config key ``key`` (``loss``, ``encoder.train.lr``, ``topk``...)."""
    return any(key == r or key.startswith(r + ".") or r.startswith(key + ".") for r in KINDS[kind].reads)


def readers(key: str) -> list[str]:
    """The stage kinds that read ``key``."""
    return [kind for kind in KINDS if reads(kind, key)]
