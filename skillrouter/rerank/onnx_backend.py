"""A CPU backend for pair cross-encoders (``reranker.backend=onnx|onnx-int8``; heads ``seq_cls`` and
``segment_cosine``): a ``torch.onnx`` export of the scorer run by ONNX Runtime, optionally int8-quantised (dynamic
quantisation of the linear layers), as the encoder's (:mod:`skillrouter.retrieval.onnx_backend`).

The request path around it does each piece of work once: pairs are assembled from text tokenised once
(:mod:`.pair_tokens`, as the torch scorer's), batched by length, each batch padded to its own longest pair.

Qwen3's yes/no rerankers (``head: causal_lm``) stay in torch: their export drags the decoder's cache and rotary
position code through the tracer for one logit at the last position, and on a GPU, where they belong, torch is the fast
path anyway.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from ..batches import padded, token_budget_batches
from ..retrieval.onnx_backend import quantize, session
from ..throughput import Throughput
from .pair_tokens import PairTokens
from .spec import PAIR_HEADS, RerankerSpec

# int8 leaves each transformer layer's FFN output projection in float: its input, after the GELU, has the outlier
# activations one scale per tensor cannot hold. Measured on a MiniLM cross-encoder fine-tuned on the SkillRet-layout
# sample (its 9 test queries' top-20): score correlation with torch 0.962 with every linear layer in int8 (Hit@1 -11
# points), 0.996 with these six left in float; per-channel weight scales as well (0.9987 against 0.9948 per tensor on
# the tiny data's reranker).
FLOAT_NODES = r"/layer\.\d+/output/dense/"


def export(scorer, out_dir: Path, int8: bool) -> str:
    """Export a :class:`~skillrouter.rerank.scorers.PairScorer` (a pair head: the score as it computes it) and its
    tokenizer to ``out_dir``; returns the model file's name."""
    import torch

    if scorer.spec.head not in PAIR_HEADS:
        raise ValueError(f"reranker.backend=onnx runs pair cross-encoders ({', '.join(PAIR_HEADS)}); head "
                         f"{scorer.spec.head!r} runs in torch (reranker.backend=torch)")
    model = scorer.model.cpu().eval()
    enc = scorer.tokenizer(["an example query to trace", "a second one"], ["a skill text", "another, longer skill text"],
                           padding=True, return_tensors="pt")
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]

    class Score(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner  # the scorer's model, registered here so that its weights export as initializers

        def forward(self, *args):
            return scorer.pair_scores(dict(zip(names, args)))  # self.inner is scorer.model: its weights are these

    dynamic = {**{n: {0: "batch", 1: "seq"} for n in names}, "score": {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Score(model), tuple(enc[n] for n in names), str(out_dir / "model.onnx"), input_names=names,
                          output_names=["score"], dynamic_axes=dynamic, opset_version=17, dynamo=False)
    scorer.tokenizer.save_pretrained(out_dir)
    model.config.save_pretrained(out_dir)  # the architecture: what a throughput record counts FLOPs by
    if not int8:
        return "model.onnx"
    quantize(out_dir / "model.onnx", out_dir / "model.int8.onnx", per_channel=True, keep_float=FLOAT_NODES)
    (out_dir / "model.onnx").unlink()
    return "model.int8.onnx"


class OnnxPairScorer:
    """``score(queries, docs)`` of a pair cross-encoder in ONNX Runtime (see the module docstring)."""

    def __init__(self, spec: RerankerSpec, folder: str | Path, file: str):
        from transformers import AutoConfig, AutoTokenizer

        self.spec = spec
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.config = AutoConfig.from_pretrained(str(folder)) if Path(folder, "config.json").exists() else None
        self.session = session(Path(folder) / file)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.pad = self.tokenizer.pad_token_id or 0
        self.pairs = PairTokens(self.tokenizer, spec.max_length, spec.query_max_tokens)
        self.meter: Throughput | None = None  # counts the tokens of every batch (set by whoever times the work)

    def pair_ids(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        return self.pairs.pair_ids(queries, docs)

    def kept_tokens(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[int, int, int, int]]:
        return self.pairs.kept_tokens(queries, docs)

    def score(self, queries: Sequence[str], docs: Sequence[str]) -> list[float]:
        pairs = self.pair_ids(queries, docs)
        out = np.zeros(len(pairs), dtype=np.float32)
        for idx in token_budget_batches([len(ids) for ids, _ in pairs], None, self.spec.batch_size):
            feed = padded([pairs[i][0] for i in idx], self.pad, [pairs[i][1] for i in idx])
            if self.meter is not None:
                self.meter.count([len(pairs[i][0]) for i in idx], feed["input_ids"].size)
            out[idx] = self.session.run(None, {k: feed[k] for k in self.inputs})[0]
        return out.tolist()
