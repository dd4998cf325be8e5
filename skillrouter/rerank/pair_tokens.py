"""Cross-encoder pairs assembled from text tokenised once, for every backend that scores or trains a
sequence-classification reranker (torch, bf16, ONNX Runtime).

A query is cut to ``query_max_tokens`` and tokenised once however many candidates it is paired with, a skill text is
tokenised once per process (a bounded cache: a server or a training epoch sees the same skills again and again), and
each pair's ids are assembled from those pieces with the tokenizer's own special tokens and truncation
(``longest_first``, or ``only_second`` after a query cap): the ids the tokenizer makes of the pair, tested. Pairs are
then batched by length, each batch padded to its own longest pair, so no step of scoring or training tokenises.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence

TEXT_CACHE = 65_536  # texts whose tokens a process keeps


def longest_first(q: int, d: int, budget: int) -> tuple[int, int]:
    """What the (fast) tokenizer's ``longest_first`` keeps of a pair: the shorter whole when it fits in half the budget,
    else half each, the odd token to the longer."""
    if q + d <= budget:
        return q, d
    half = budget // 2
    if min(q, d) <= half:
        return (q, budget - q) if q <= d else (budget - d, d)
    return (budget - half, half) if q > d else (half, budget - half)


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


class TokenCache:
    """Texts -> their ids without special tokens, kept for the last :data:`TEXT_CACHE` texts used; :meth:`warm`
    tokenises many texts in one call (the fast tokenizer's threads) before the work that reads them."""

    def __init__(self, tokenizer, size: int = TEXT_CACHE):
        self.tokenizer, self.size = tokenizer, size
        self.ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def warm(self, texts: Iterable[str]) -> None:
        fresh = [t for t in dict.fromkeys(texts) if t not in self.ids]
        for start in range(0, len(fresh), self.size):
            part = fresh[start:start + self.size]
            for text, ids in zip(part, self.tokenizer(part, add_special_tokens=False)["input_ids"] if part else []):
                self._put(text, tuple(ids))

    def __call__(self, text: str) -> tuple[int, ...]:
        ids = self.ids.get(text)
        if ids is None:
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            self._put(text, ids)
        else:
            self.ids.move_to_end(text)
        return ids

    def _put(self, text: str, ids: tuple[int, ...]) -> None:
        self.ids[text] = ids
        while len(self.ids) > self.size:
            self.ids.popitem(last=False)


class PairTokens:
    """The ids a sequence-classification cross-encoder sees of (query, skill) pairs (see the module docstring)."""

    def __init__(self, tokenizer, max_length: int, query_max_tokens: int | None = None):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.query_cap = min(query_max_tokens, max_length // 2) if query_max_tokens else None
        self.tokens = TokenCache(tokenizer)
        self.template = PairTemplate(tokenizer)
        self.budget = max_length - tokenizer.num_special_tokens_to_add(pair=True)

    def _kept(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[tuple[int, ...], tuple[int, ...], int, int]]:
        """Per pair: the query's and the skill's tokens and how many of each the truncation keeps."""
        out = []
        for q, d in zip(queries, docs):
            qi, di = self.tokens(q), self.tokens(d)
            if self.query_cap:
                qk = min(len(qi), self.query_cap)
                out.append((qi, di, qk, min(len(di), self.budget - qk)))
            else:
                out.append((qi, di, *longest_first(len(qi), len(di), self.budget)))
        return out

    def pair_ids(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """Each pair's ``(input_ids, token_type_ids)``: what the tokenizer makes of it under the spec's truncation."""
        return [self.template(list(qi[:qk]), list(di[:dk])) for qi, di, qk, dk in self._kept(queries, docs)]

    def kept_tokens(self, queries: Sequence[str], docs: Sequence[str]) -> list[tuple[int, int, int, int]]:
        """Per pair ``(query tokens, kept, skill tokens, kept)``."""
        return [(len(qi), qk, len(di), dk) for qi, di, qk, dk in self._kept(queries, docs)]
