"""Three-layer false-negative filter for mined hard negatives.

A mined "negative" that is really a positive teaches the encoder the wrong thing. Layers, applied in
order, each switchable (``None``/``false`` turns a layer off):

1. ``same_name``: the negative has the same (case-folded) name as a GT skill;
2. ``body_trigram_jaccard``: Jaccard similarity of word-trigram sets of the bodies > threshold (0.6);
3. ``embedding_cosine``: cosine of the base encoder's embeddings > threshold (0.92).

Removals are counted per layer (SkillRouter removed 24,879 / 13,860 / 326, about 10 % of mined pairs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..data.types import Skill

LAYERS = ("same_name", "body_trigram_jaccard", "embedding_cosine")
_WORD = re.compile(r"\w+")


def trigrams(text: str) -> frozenset[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return frozenset(zip(words, words[1:], words[2:]))


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass
class FalseNegativeFilter:
    skills: dict[str, Skill]
    embeddings: dict[str, np.ndarray] | None = None  # unit-norm, by skill id
    same_name: bool = True
    body_trigram_jaccard: float | None = 0.6
    embedding_cosine: float | None = 0.92
    removed: dict[str, int] = field(default_factory=lambda: {layer: 0 for layer in LAYERS})
    checked: int = 0
    _trigram_cache: dict[str, frozenset] = field(default_factory=dict, repr=False)

    def _tri(self, sid: str) -> frozenset:
        if sid not in self._trigram_cache:
            self._trigram_cache[sid] = trigrams(self.skills[sid].body)
        return self._trigram_cache[sid]

    def layer_rejecting(self, negative: str, gt: tuple[str, ...]) -> str | None:
        """The first layer that flags ``negative`` as a likely positive for ``gt``, else None."""
        neg = self.skills[negative]
        if self.same_name and any(neg.name.casefold() == self.skills[g].name.casefold() for g in gt):
            return "same_name"
        if self.body_trigram_jaccard is not None and any(
                jaccard(self._tri(negative), self._tri(g)) > self.body_trigram_jaccard for g in gt):
            return "body_trigram_jaccard"
        if self.embedding_cosine is not None and self.embeddings is not None and any(
                float(self.embeddings[negative] @ self.embeddings[g]) > self.embedding_cosine for g in gt):
            return "embedding_cosine"
        return None

    def keep(self, negative: str, gt: tuple[str, ...]) -> bool:
        self.checked += 1
        layer = self.layer_rejecting(negative, gt)
        if layer:
            self.removed[layer] += 1
        return layer is None

    def report(self) -> dict[str, int | float]:
        total = sum(self.removed.values())
        return {**self.removed, "checked": self.checked, "removed": total,
                "removed_fraction": round(total / self.checked, 4) if self.checked else 0.0}
