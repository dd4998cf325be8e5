"""A CPU backend for sequence-classification cross-encoders (``reranker.backend=onnx|onnx-int8``): a ``torch.onnx``
export of the classifier run by ONNX Runtime, optionally int8-quantised (dynamic quantisation of the linear layers), as
the encoder's (:mod:`skillrouter.retrieval.onnx_backend`).

The request path around it does each piece of work once: a query is cut to ``query_max_tokens`` and tokenised once
however many candidates it is paired with, a skill text is tokenised once per process (a bounded cache: a server sees
the same skills again and again), each pair's ids are assembled from those pieces with the tokenizer's own special
tokens and truncation (``longest_first``, or ``only_second`` after a query cap: the ids the tokenizer makes of the pair,
tested), and pairs are batched by length, each batch padded to its own longest pair.

Qwen3's yes/no rerankers (``head: causal_lm``) stay in torch: their export drags the decoder's cache and rotary
position code through the tracer for one logit at the last position, and on a GPU, where they belong, torch is the fast
path anyway.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from ..retrieval.onnx_backend import quantize, session
from .spec import RerankerSpec

TEXT_CACHE = 65_536  # skill texts whose tokens a process keeps
# int8 leaves each transformer layer's FFN output projection in float: its input, after the GELU, has the outlier
# activations one scale per tensor cannot hold. Measured on a MiniLM cross-encoder fine-tuned on the SkillRet-layout
# sample (its 9 test queries' top-20): score correlation with torch 0.962 with every linear layer in int8 (Hit@1 -11
# points), 0.996 with these six left in float; per-channel weight scales as well (0.9987 against 0.9948 per tensor on
# the tiny data's reranker).
FLOAT_NODES = r"/layer\.\d+/output/dense/"


def export(scorer, out_dir: Path, int8: bool) -> str:
    """Export a :class:`~skillrouter.rerank.scorers.PairScorer` (``seq_cls``) and its tokenizer to ``out_dir``;
    returns the model file's name."""
    import torch

    if scorer.spec.head != "seq_cls":
        raise ValueError(f"reranker.backend=onnx runs sequence-classification cross-encoders; head {scorer.spec.head!r} "
                         "runs in torch (reranker.backend=torch)")
    model = scorer.model.cpu().eval()
    enc = scorer.tokenizer(["an example query to trace", "a second one"], ["a skill text", "another, longer skill text"],
                           padding=True, return_tensors="pt")
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]

    class Logit(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(names, args))).logits[:, 0]

    dynamic = {**{n: {0: "batch", 1: "seq"} for n in names}, "score": {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Logit(model), tuple(enc[n] for n in names), str(out_dir / "model.onnx"), input_names=names,
                          output_names=["score"], dynamic_axes=dynamic, opset_version=17, dynamo=False)
    scorer.tokenizer.save_pretrained(out_dir)
    if not int8:
        return "model.onnx"
    quantize(out_dir / "model.onnx", out_dir / "model.int8.onnx", per_channel=True, keep_float=FLOAT_NODES)
    (out_dir / "model.onnx").unlink()
    return "model.int8.onnx"


class PairTemplate:
    """Where a tokenizer puts its special tokens around a pair (``[CLS] a [SEP] b [SEP]`` for BERT), and the token
    type of each part, learnt from its own encoding of a probe pair: a pair is then assembled from ids tokenised
    once, as the tokenizer would have made it."""

    def __init__(self, tokenizer):
        a, b = (tokenizer(word, add_special_tokens=False)["input_ids"][0] for word in ("alpha", "beta"))
        probe = tokenizer(tokenizer.decode([a]), tokenizer.decode([b]), return_token_type_ids=True)
        ids, types = probe["input_ids"], probe.get("token_type_ids") or [0] * len(probe["input_ids"])
        i, j = ids.index(a), len(ids) - 1 - ids[::-1].index(b)
        self.parts = [(ids[:i], types[:i]), (ids[i + 1:j], types[i + 1:j]), (ids[j + 1:], types[j + 1:])]
        self.types = (types[i], types[j])

    def __call__(self, first: list[int], second: list[int]) -> tuple[list[int], list[int]]:
        (pre, pre_t), (mid, mid_t), (post, post_t) = self.parts
        return ([*pre, *first, *mid, *second, *post],
                [*pre_t, *[self.types[0]] * len(first), *mid_t, *[self.types[1]] * len(second), *post_t])


class OnnxPairScorer:
    """``score(queries, docs)`` of a sequence-classification cross-encoder in ONNX Runtime (see the module docstring)."""

    def __init__(self, spec: RerankerSpec, folder: str | Path, file: str):
        from transformers import AutoTokenizer

        self.spec = spec
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.session = session(Path(folder) / file)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.pad = self.tokenizer.pad_token_id or 0
        self.template = PairTemplate(self.tokenizer)
        self._tokens = functools.lru_cache(maxsize=TEXT_CACHE)(self._encode)

    @property
    def query_cap(self) -> int | None:
        return min(self.spec.query_max_tokens, self.spec.max_length // 2) if self.spec.query_max_tokens else None

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _kept(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[tuple[int, ...], tuple[int, ...], int, int]]:
        """Per pair: the query's and the skill's tokens and how many of each the truncation keeps."""
        from .scorers import _longest_first

        budget = self.spec.max_length - self.tokenizer.num_special_tokens_to_add(pair=True)
        cap = self.query_cap
        query_ids = {q: self._encode(q) for q in dict.fromkeys(queries)}  # each query once, however many pairs
        out = []
        for q, d in zip(queries, docs):
            qi, di = query_ids[q], self._tokens(d)
            if cap:
                qk = min(len(qi), cap)
                out.append((qi, di, qk, min(len(di), budget - qk)))
            else:
                out.append((qi, di, *_longest_first(len(qi), len(di), budget)))
        return out

    def pair_ids(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """Each pair's ``(input_ids, token_type_ids)``: what the tokenizer makes of it under the spec's truncation."""
        return [self.template(list(qi[:qk]), list(di[:dk])) for qi, di, qk, dk in self._kept(queries, docs)]

    def kept_tokens(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[int, int, int, int]]:
        """Per pair ``(query tokens, kept, skill tokens, kept)``, as :meth:`PairScorer.kept_tokens` says them."""
        return [(len(qi), qk, len(di), dk) for qi, di, qk, dk in self._kept(queries, docs)]

    def score(self, queries: Sequence[str], docs: Sequence[str]) -> list[float]:
        pairs = self.pair_ids(queries, docs)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # similar lengths share a batch
        out = np.zeros(len(pairs), dtype=np.float32)
        for start in range(0, len(order), self.spec.batch_size):
            idx = order[start:start + self.spec.batch_size]
            width = max(len(pairs[i][0]) for i in idx)
            ids = np.full((len(idx), width), self.pad, dtype=np.int64)
            types = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(pairs[i][0])
                ids[row, :n], types[row, :n], mask[row, :n] = pairs[i][0], pairs[i][1], 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            out[idx] = self.session.run(None, {k: feed[k] for k in self.inputs})[0]
        return out.tolist()
