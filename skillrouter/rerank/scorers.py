"""Cross-encoder scoring heads, trainable and usable at evaluation.

* ``seq_cls``: an ordinary sequence-classification cross-encoder (one logit per (query, skill) pair); with
  ``query_max_tokens`` the query is cut to that many tokens first and the skill keeps the rest of ``max_length``
  (a long task description otherwise shares the budget evenly and leaves the skill little more than its name and
  description), else the tokenizer's ``longest_first``;
* ``segment_cosine``: the bi-encoder's own score on the cross-encoder's input: the pair goes through the encoder
  jointly (query and skill attend to each other), and the score is the cosine of the mean-pooled hidden states of the
  query segment (token type 0, its special tokens included) and of the skill segment (type 1), over ``temperature``.
  No parameter starts random, so the untrained model already ranks as its pretraining taught it and fine-tuning
  starts from there instead of from a fresh head (issue 45: on the built-in data a fresh ``seq_cls`` head trained on
  ~120 pairs fell below its first stage in every seed). Needs a tokenizer that marks the segments (BERT's token types);
* ``causal_lm``: Qwen3-Reranker style: the pair is written into a yes/no judging prompt and the score
  is logit("yes") - logit("no") at the last position (inputs left-padded so that is position -1);
  ``sigmoid`` of it is P("yes") against "no", so the order is the same. Prompt formats: ``qwen3``
  (Qwen3-Reranker's template, document cut first) and the SkillRouter release's ``flat-full`` /
  ``flat-nd`` / ``struct`` (its ``format_rerank_prompt`` + ``tokenize_reranker_text``);
* ``st_cross_encoder``: a sentence-transformers ``CrossEncoder`` checkpoint scored with
  ``predict(pairs, prompt=instruction)``, the body segment of ``name | description | body`` cut
  to ``body_max_tokens`` first (R3-Reranker's ``infer.py``). Evaluation only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..batches import padded, token_budget_batches
from ..data.loaders import R3_SEPARATOR
from ..models import device, resolve_model
from ..throughput import Throughput
from .pair_tokens import PairTokens
from .spec import PAIR_HEADS, RerankerSpec

QWEN3_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
                "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


RELEASE_FORMATS = {"flat-full": "\n\n", "flat-nd": "\n\n", "struct": "\n\n", "skillret": "\n"}  # prompt lines' separator


class PairScorer(nn.Module):
    """Scores (query, skill text) pairs; gradients flow, so the same object trains and evaluates."""

    def __init__(self, spec: RerankerSpec, model_path: str | None = None, lora: dict | None = None):
        super().__init__()
        from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        self.spec = spec
        path = model_path or resolve_model(spec.model)
        adapter = Path(path, "adapter_config.json").exists()
        base_path = self._adapter_base(path) if adapter else path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if spec.head == "seq_cls":
            model = AutoModelForSequenceClassification.from_pretrained(base_path, num_labels=1)
        elif spec.head == "causal_lm":
            self.tokenizer.padding_side = "left"
            model = AutoModelForCausalLM.from_pretrained(base_path)
            self.yes_id = self.tokenizer.convert_tokens_to_ids("yes")
            self.no_id = self.tokenizer.convert_tokens_to_ids("no")
            if self.yes_id == self.tokenizer.unk_token_id or self.no_id == self.tokenizer.unk_token_id:
                raise ValueError(f"{path}: tokenizer has no single 'yes'/'no' tokens for a causal-LM reranker")
        elif spec.head == "segment_cosine":
            model = AutoModel.from_pretrained(base_path)
        else:
            raise ValueError(f"reranker.head must be seq_cls, segment_cosine or causal_lm, got {spec.head!r}")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model.config.pad_token_id = self.tokenizer.pad_token_id
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, path)
        elif lora:
            from peft import LoraConfig, get_peft_model

            task = {"seq_cls": "SEQ_CLS", "segment_cosine": "FEATURE_EXTRACTION"}.get(spec.head, "CAUSAL_LM")
            model = get_peft_model(model, LoraConfig(task_type=task, target_modules="all-linear", **lora))
        self.model = model.to(device())
        self.pairs = PairTokens(self.tokenizer, spec.max_length, spec.query_max_tokens)
        if spec.head == "segment_cosine" and len(set(self.pairs.template.types)) < 2:
            raise ValueError(f"{path}: reranker.head=segment_cosine needs a tokenizer whose token types mark a pair's two "
                             f"segments (BERT-style); this one gives both the same type (use head seq_cls or causal_lm)")
        self.meter: Throughput | None = None  # counts the tokens of every pass (set by whoever times the work)

    @staticmethod
    def _adapter_base(path: str) -> str:
        import json

        return json.loads(Path(path, "adapter_config.json").read_text())["base_model_name_or_path"]

    def causal_rows(self, queries: list[str], docs: list[str], offsets: bool = False
                    ) -> tuple[list[list[int]], list[list[tuple[int, int, int]]]]:
        """Each pair's yes/no prompt as token ids (unpadded) and, with ``offsets``, for each document token
        kept in it ``(position in the row, start, end)``: the characters of the document it came from (the
        field-attention analysis reads which field each input position belongs to).

        ``qwen3``: prefix + ``<Instruct>/<Query>/<Document>`` + suffix, fit to ``max_length`` by cutting
        the document; the instruction+query head is cut (from its end) only where it would leave the
        document less than a quarter of the budget. Release formats: prefix + the tokenizer's own
        truncation of ``<Instruct>: i\n\n<Query>: q\n\n<document block>`` to ``max_length`` minus
        prefix and suffix + suffix, exactly as the SkillRouter evaluator builds them (SkillRet's
        ``_score_batch``: the same with single newlines).
        """
        tok = self.tokenizer

        def ids(texts: list[str]) -> list[list[int]]:
            return tok(texts, add_special_tokens=False)["input_ids"]

        prefix, suffix = ids([QWEN3_PREFIX])[0], ids([QWEN3_SUFFIX])[0]
        budget = self.spec.max_length - len(prefix) - len(suffix)
        rows: list[list[int]] = []
        spans: list[list[tuple[int, int, int]]] = []
        if self.spec.prompt_format in RELEASE_FORMATS:
            sep = RELEASE_FORMATS[self.spec.prompt_format]
            texts = [f"<Instruct>: {self.spec.instruction}{sep}<Query>: {q}{sep}{d}" for q, d in zip(queries, docs)]
            enc = tok(texts, padding=False, truncation=True, max_length=budget, return_attention_mask=False,
                      return_offsets_mapping=offsets)
            for i, row in enumerate(enc["input_ids"]):
                rows.append(prefix + row + suffix)
                if offsets:
                    start = len(texts[i]) - len(docs[i])
                    spans.append([(len(prefix) + j, a - start, b - start)
                                  for j, (a, b) in enumerate(enc["offset_mapping"][i]) if a >= start and b > a])
        else:
            queries = self.capped(queries)
            heads = [list(self.pairs.tokens(f"<Instruct>: {self.spec.instruction}\n<Query>: {q}\n<Document>: "))
                     for q in queries]
            enc = (tok(docs, add_special_tokens=False, return_offsets_mapping=True) if offsets
                   else {"input_ids": [list(self.pairs.tokens(d)) for d in docs]})
            for i, (head, doc) in enumerate(zip(heads, enc["input_ids"])):
                head = head[: budget - min(len(doc), budget // 4)]
                kept = budget - len(head)
                rows.append(prefix + head + doc[:kept] + suffix)
                if offsets:
                    spans.append([(len(prefix) + len(head) + j, a, b)
                                  for j, (a, b) in enumerate(enc["offset_mapping"][i][:kept]) if b > a])
        return rows, spans

    @property
    def query_cap(self) -> int | None:
        """``query_max_tokens``, at most half of ``max_length`` (the skill always keeps the other half)."""
        return self.pairs.query_cap

    def capped(self, queries: list[str]) -> list[str]:
        """The queries cut to :attr:`query_cap` tokens (as text: a prefix of the query), when that is set."""
        cap = self.query_cap
        if not cap:
            return list(queries)
        enc = self.tokenizer(list(queries), add_special_tokens=False, truncation=True, max_length=cap,
                             return_offsets_mapping=True)
        return [q[: offs[-1][1]] if offs else "" for q, offs in zip(queries, enc["offset_mapping"])]

    def kept_tokens(self, queries: list[str], docs: list[str]) -> list[tuple[int, int, int, int]]:
        """Per pair ``(query tokens, kept, skill tokens, kept)``: what truncation leaves the model of each."""
        if self.spec.head in PAIR_HEADS:
            return self.pairs.kept_tokens(queries, docs)
        tok = self.tokenizer
        q_total = [len(r) for r in tok(list(queries), add_special_tokens=False)["input_ids"]]
        d_total = [len(r) for r in tok(list(docs), add_special_tokens=False)["input_ids"]]
        rows, spans = self.causal_rows(queries, docs, offsets=True)
        d_kept = [len(s) for s in spans]
        q_kept = [len(r) for r in tok(self.capped(queries), add_special_tokens=False)["input_ids"]]
        return list(zip(q_total, q_kept, d_total, d_kept))

    def warm(self, texts: list[str]) -> None:
        """Tokenise ``texts`` (the skills and queries a training will pair) in one call, before its first step."""
        self.pairs.tokens.warm(texts)

    def rows(self, queries: list[str], docs: list[str]) -> list[tuple[list[int], list[int] | None]]:
        """Each pair's token ids (and token types for a sequence classifier), unpadded: assembled from cached
        tokens (:mod:`.pair_tokens`), or the yes/no prompt (:meth:`causal_rows`)."""
        if self.spec.head in PAIR_HEADS:
            return self.pairs.pair_ids(queries, docs)
        return [(row, None) for row in self.causal_rows(queries, docs)[0]]

    def features(self, rows: list[tuple[list[int], list[int] | None]]) -> dict[str, Tensor]:
        """A padded batch on the model's device: right-padded pairs, or left-padded prompts (the last position is the
        answer's)."""
        types = [t for _, t in rows] if rows[0][1] is not None and "token_type_ids" in self.tokenizer.model_input_names \
            else None
        arrays = padded([r for r, _ in rows], self.tokenizer.pad_token_id or 0, types, left=self.spec.head == "causal_lm")
        return {k: torch.from_numpy(v).to(self.model.device) for k, v in arrays.items()}

    def forward_rows(self, rows: list[tuple[list[int], list[int] | None]]) -> Tensor:
        """``[N]`` scores of N pairs' :meth:`rows`."""
        enc = self.features(rows)
        if self.meter is not None and (torch.is_grad_enabled() or not self.training):  # a cached-gradient replay counts once
            self.meter.count_mask(enc["attention_mask"])
        return self.pair_scores(enc)

    def pair_scores(self, enc: dict[str, Tensor]) -> Tensor:
        """``[N]`` scores of a padded batch as the head computes them: what :meth:`forward_rows` and an ONNX export
        (:mod:`.onnx_backend`) both run."""
        if self.spec.head == "seq_cls":
            return self.model(**enc).logits[:, 0]
        if self.spec.head == "segment_cosine":
            return self.segment_cosine(enc)
        logits = self.model(**enc, logits_to_keep=1).logits[:, -1, :]  # the LM head at the last position only
        return logits[:, self.yes_id] - logits[:, self.no_id]

    def segment_cosine(self, enc: dict[str, Tensor]) -> Tensor:
        """``[N]`` cosines of each pair's query-segment and skill-segment mean hidden states, over the temperature
        (in fp32: under bf16 autocast the score keeps its precision, as :mod:`.score_layer` does for a head)."""
        hidden = self.model(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        second = enc["token_type_ids"].unsqueeze(-1).float()  # 1 on the skill's tokens
        query, skill = mask * (1 - second), mask * second
        q = (hidden * query).sum(1) / query.sum(1).clamp(min=1)
        d = (hidden * skill).sum(1) / skill.sum(1).clamp(min=1)
        return nn.functional.cosine_similarity(q, d, dim=-1) / self.spec.temperature

    def forward(self, queries: list[str], docs: list[str]) -> Tensor:
        """``[N]`` scores for N pairs."""
        return self.forward_rows(self.rows(queries, docs))

    bf16 = False  # score in bfloat16 autocast (``reranker.backend=bf16``): fast where the CPU has AMX or AVX-512 BF16

    @torch.no_grad()
    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        """Scores of N pairs, batched by length (``batch_size`` pairs, each batch padded to its own longest)."""
        self.eval()
        rows = self.rows(queries, docs)
        out = np.zeros(len(rows), dtype=np.float32)
        with torch.autocast(self.model.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            for idx in token_budget_batches([len(r) for r, _ in rows], None, self.spec.batch_size):
                out[idx] = self.forward_rows([rows[i] for i in idx]).float().cpu().numpy()
        return out.tolist()

    def save(self, out_dir: Path) -> None:
        """Full weights, or only the LoRA adapter (which records its base path)."""
        self.model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)


class CrossEncoderScorer:
    """A sentence-transformers ``CrossEncoder`` as R3 runs it (evaluation only)."""

    def __init__(self, spec: RerankerSpec, model_path: str | None = None):
        from sentence_transformers import CrossEncoder

        self.spec = spec
        self.model = CrossEncoder(model_path or resolve_model(spec.model), device=device(),
                                  trust_remote_code=spec.trust_remote_code)
        self.model.max_seq_length = spec.max_length  # R3 sets `max_length`, the same setting under its old name

    def truncate_body(self, text: str) -> str:
        """Cut only the body segment of ``name | description | body`` to ``body_max_tokens`` tokens."""
        parts = text.split(R3_SEPARATOR, 2)
        if len(parts) < 3:
            return text
        tok = self.model.tokenizer
        ids = tok.encode(parts[2], add_special_tokens=False)
        if len(ids) <= self.spec.body_max_tokens:
            return text
        return R3_SEPARATOR.join(parts[:2] + [tok.decode(ids[: self.spec.body_max_tokens], skip_special_tokens=True)])

    def pairs(self, queries: list[str], docs: list[str]) -> list[tuple[str, str]]:
        return [(q, self.truncate_body(d)) for q, d in zip(queries, docs)]

    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        scores = self.model.predict(self.pairs(queries, docs), batch_size=self.spec.batch_size, prompt=self.spec.instruction,
                                    show_progress_bar=False, convert_to_numpy=True)
        return [float(s) for s in scores]


def make_scorer(spec: RerankerSpec, model_path: str | None = None, onnx: tuple[str, str] | None = None,
                bf16: bool = False):
    """A scorer for evaluation: ``onnx`` (an export's folder and model file) runs it in ONNX Runtime
    (:mod:`.onnx_backend`), ``bf16`` in bfloat16 autocast with the score layer in fp32 (:mod:`.score_layer`). A
    checkpoint without a scoring head (``minilm_ce``: the untrained row) gets a fresh one, drawn under a fixed seed and
    without touching the process's random state, so its scores do not depend on what else ran in the process before it
    (the export holds that head)."""
    if onnx is not None:
        from .onnx_backend import OnnxPairScorer

        return OnnxPairScorer(spec, *onnx)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        scorer = CrossEncoderScorer(spec, model_path) if spec.head == "st_cross_encoder" else PairScorer(spec, model_path)
    if bf16 and isinstance(scorer, PairScorer):
        from .score_layer import keep_fp32

        scorer.bf16 = True
        keep_fp32(scorer)
    return scorer
