"""The released-checkpoint presets feed their models exactly what the releases' evaluators do.

Each preset is composed from conf/ with a tiny random Qwen3 in place of the hub checkpoint; the
expected strings and token ids are written by hand from the releases' templates."""
from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from skillrouter.data.types import Skill
from skillrouter.models import build_tiny_qwen3, device
from skillrouter.pipeline.compose import encoder_spec, encoder_text, reranker_spec, reranker_text
from skillrouter.rerank.scorers import QWEN3_PREFIX, QWEN3_SUFFIX, CrossEncoderScorer, PairScorer
from skillrouter.retrieval.dense import encode, load_encoder

from .conftest import ROOT

SR_QUERY = ("Instruct: Given a coding task description, retrieve the most relevant skill document that would help an "
            "agent complete the task\nQuery:")
SR_RERANK = "Given a coding task description, judge whether the skill document is relevant and useful for completing the task"
R3_QUERY = "Instruct: Given a user request, retrieve the agent skill that solves it.\nQuery: "
R3_RERANK = "Given a user request, retrieve the agent skill that solves it."
LONG = Skill("s1", " csv-kit ", " Cleans CSV files. " + "d" * 600, "  Step one.\n" + "b" * 9000)
TASK = "  Fix the CSV export; keep the header.  " + "q" * 2100


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    return {head: build_tiny_qwen3(root / head, head=head) for head in ("base", "causal_lm", "seq_cls")}


def _cfg(*overrides: str):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=["hydra.runtime.cwd=.", *overrides], return_hydra_config=False)


def test_skillrouter_embedding_preset(tiny):
    cfg = _cfg("encoder=skillrouter_emb_0.6b", f"encoder.model={tiny['base']}")
    text = encoder_text(cfg)
    assert text.skill(LONG) == f"{LONG.name} | {LONG.description[:500]} | {LONG.body[:8000]}"
    assert text.skill(Skill("e", "n", "", "")) == "n |  | "
    assert text.query(TASK) == SR_QUERY + TASK[:2000]
    model = load_encoder(encoder_spec(cfg.encoder))
    batch = [text.query("short task"), text.skill(LONG)]
    features = model.tokenize(batch)
    tok = model.tokenizer
    expected = tok(batch, padding=True, truncation=True, max_length=4096, return_tensors="pt")
    assert tok.padding_side == "left" and torch.equal(features["input_ids"], expected["input_ids"])
    assert features["attention_mask"][:, -1].all()  # left padding: the last position is every row's last token
    # last-token pooling, normalised, as the release's encode_texts computes it
    from transformers import AutoModel
    raw = AutoModel.from_pretrained(tiny["base"])
    with torch.no_grad():
        hidden = raw(**expected).last_hidden_state[:, -1]
    reference = torch.nn.functional.normalize(hidden, dim=1).numpy()
    assert encode(model, batch, 2, False) == pytest.approx(reference, abs=1e-5 if device() == "cpu" else 3e-2)  # bf16 on CUDA


def _causal_rows(scorer: PairScorer, queries, docs):
    return [row[row != scorer.tokenizer.pad_token_id].tolist() for row in scorer.features(scorer.rows(queries, docs))["input_ids"]]


@pytest.mark.parametrize("prompt_format", ["flat-full", "flat-nd", "struct"])
def test_skillrouter_reranker_preset(tiny, prompt_format):
    cfg = _cfg("reranker=skillrouter_rank_0.6b", f"reranker.model={tiny['causal_lm']}", f"reranker.prompt_format={prompt_format}",
               "reranker.max_length=96")
    text = reranker_text(cfg)
    doc = text.skill(LONG)
    desc, body = LONG.description[:500], LONG.body[:2000]
    assert doc == {"flat-full": f"<Document>: {LONG.name} | {desc} | {body}", "flat-nd": f"<Document>: {LONG.name} | {desc}",
                   "struct": f"<Skill>:\n<Name>: {LONG.name}\n<Description>: {desc}\n<Body>: {body}"}[prompt_format]
    assert text.query(TASK) == TASK  # the task text as written
    scorer = PairScorer(reranker_spec(cfg.reranker))
    prompt = f"<Instruct>: {SR_RERANK}\n\n<Query>: {TASK}\n\n{doc}"
    tok = scorer.tokenizer
    prefix = tok.encode(QWEN3_PREFIX, add_special_tokens=False)
    suffix = tok.encode(QWEN3_SUFFIX, add_special_tokens=False)
    body_ids = tok(prompt, padding=False, truncation=True, max_length=96 - len(prefix) - len(suffix))["input_ids"]
    short = "<Instruct>: " + SR_RERANK + "\n\n<Query>: x\n\n<Document>: n | d | b"
    short_ids = prefix + tok(short, truncation=True, max_length=96 - len(prefix) - len(suffix))["input_ids"] + suffix
    rows = scorer.features(scorer.rows([TASK, "x"], [doc, "<Document>: n | d | b"]))
    assert _causal_rows(scorer, [TASK, "x"], [doc, "<Document>: n | d | b"]) == [prefix + body_ids + suffix, short_ids]
    assert rows["input_ids"].shape[1] == 96 and rows["attention_mask"][:, -1].all()  # left-padded to the longest
    scores = scorer.score([TASK, "x"], [doc, "<Document>: n | d | b"])
    with torch.no_grad():
        logits = scorer.model(**rows).logits[:, -1, :].float().cpu()
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    assert scores == pytest.approx((logits[:, yes] - logits[:, no]).tolist(), abs=1e-5)


def test_r3_embedding_preset(tiny):
    cfg = _cfg("encoder=r3_emb_0.6b", f"encoder.model={tiny['base']}")
    text = encoder_text(cfg)
    released = Skill("skill-00001", "csv-kit", "Cleans CSV", "x" * 9000, extra={"text": "csv-kit | Cleans CSV | " + "x" * 9000})
    assert text.skill(released) == released.extra["text"]
    assert text.query(TASK) == R3_QUERY + TASK
    model = load_encoder(encoder_spec(cfg.encoder))
    assert model.max_seq_length == 4096


def test_r3_reranker_preset(tiny):
    cfg = _cfg("reranker=r3_rank_0.6b", f"reranker.model={tiny['seq_cls']}", "reranker.body_max_tokens=5")
    text = reranker_text(cfg)
    released = Skill("skill-00001", "csv-kit", "Cleans CSV", "", extra={"text": "csv-kit | Cleans CSV | drop the repeated rows of every table"})
    assert text.skill(released) == released.extra["text"] and text.query(TASK) == TASK
    scorer = CrossEncoderScorer(reranker_spec(cfg.reranker))
    tok = scorer.model.tokenizer
    cut = tok.decode(tok.encode("drop the repeated rows of every table", add_special_tokens=False)[:5], skip_special_tokens=True)
    pairs = scorer.pairs(["dedupe my table"], [released.extra["text"]])
    assert pairs == [("dedupe my table", f"csv-kit | Cleans CSV | {cut}")]
    assert scorer.model.max_seq_length == 4096
    features = scorer.model.preprocess(pairs, prompt=R3_RERANK)
    expected = tok([R3_RERANK + "dedupe my table"], [pairs[0][1]], padding=True, truncation="longest_first",
                   max_length=4096, return_tensors="pt")
    assert torch.equal(features["input_ids"], expected["input_ids"])


SKILLRET_QUERY = "Instruct: Given a skill search query, retrieve relevant skills that match the query\nQuery: "
SKILLRET_RERANK = "Given a skill search query, judge whether the skill document is relevant and useful for the query"
SKILLCORPUS_QUERY = ("Instruct: Given a task description, retrieve the most relevant skill document that would help an "
                     "agent complete the task\nQuery:")
SKILLCORPUS_RERANK = ("Given a task description, judge whether the skill document is relevant and useful for completing "
                      "the task")
RELEASED = Skill("test/csv-kit", "csv-kit", "Cleans CSV", "x" * 9000, extra={"text": "csv-kit | Cleans CSV | " + "x" * 9000})


@pytest.mark.parametrize("preset", ["skillret_emb_0.6b", "skillret_emb_8b"])
def test_skillret_embedding_presets(tiny, preset):
    cfg = _cfg(f"encoder={preset}", f"encoder.model={tiny['base']}")
    text = encoder_text(cfg)
    assert text.skill(RELEASED) == RELEASED.extra["text"]  # name | description | skill_md, nothing cut
    assert text.query(TASK) == SKILLRET_QUERY + TASK  # the prompt, then the query as written
    assert _cfg(f"encoder={preset}").encoder.model == {"skillret_emb_0.6b": "ThakiCloud/SKILLRET-Embedding-0.6B",
                                 "skillret_emb_8b": "ThakiCloud/SKILLRET-Embedding-8B"}[preset]
    model = load_encoder(encoder_spec(cfg.encoder))
    assert model.max_seq_length == 32768
    batch = [text.query("dedupe my table"), text.skill(RELEASED)]
    expected = model.tokenizer(batch, padding=True, truncation=True, max_length=32768, return_tensors="pt")
    assert torch.equal(model.tokenize(batch)["input_ids"], expected["input_ids"])


def test_skillret_reranker_preset(tiny):
    cfg = _cfg("reranker=skillret_rank_0.6b", f"reranker.model={tiny['causal_lm']}", "reranker.max_length=80")
    text = reranker_text(cfg)
    doc = text.skill(RELEASED)
    assert doc == "<Document>: " + RELEASED.extra["text"] and text.query(TASK) == TASK
    assert _cfg("reranker=skillret_rank_0.6b").reranker.model == "ThakiCloud/SKILLRET-Reranker-0.6B"
    assert cfg.reranker.instruction == SKILLRET_RERANK
    scorer = PairScorer(reranker_spec(cfg.reranker))
    tok = scorer.tokenizer
    prefix, suffix = tok.encode(QWEN3_PREFIX, add_special_tokens=False), tok.encode(QWEN3_SUFFIX, add_special_tokens=False)
    pair = f"<Instruct>: {SKILLRET_RERANK}\n<Query>: {TASK}\n{doc}"  # Qwen3RankModel._format_pair: single newlines
    body = tok(pair, padding=False, truncation=True, max_length=80 - len(prefix) - len(suffix))["input_ids"]
    assert _causal_rows(scorer, [TASK], [doc]) == [prefix + body + suffix]
    assert cfg.topk == 20  # RERANK_TOP_K


def test_skillcorpus_presets(tiny):
    cfg = _cfg("encoder=skillcorpus_emb_0.6b", f"encoder.model={tiny['base']}", "reranker=skillcorpus_rank_0.6b",
               f"reranker.model={tiny['causal_lm']}", "reranker.max_length=96")
    hub = _cfg("encoder=skillcorpus_emb_0.6b", "reranker=skillcorpus_rank_0.6b")
    assert (hub.encoder.model, hub.reranker.model) == ("EverMind-AI/skillcorpus-embedding-0.6b",
                                                       "EverMind-AI/skillcorpus-reranker-0.6b")
    enc = encoder_text(cfg)
    assert enc.skill(LONG) == f"{LONG.name} | {LONG.description[:500]} | {LONG.body[:8000]}"  # format_skill
    assert enc.query(TASK) == SKILLCORPUS_QUERY + TASK[:2000]
    model = load_encoder(encoder_spec(cfg.encoder))
    assert model.max_seq_length == 2048 and model.tokenizer.padding_side == "left"
    rr = reranker_text(cfg)
    doc = rr.skill(LONG)
    assert doc == f"<Document>: {LONG.name} | {LONG.description[:500]} | {LONG.body[:2000]}"
    scorer = PairScorer(reranker_spec(cfg.reranker))
    tok = scorer.tokenizer
    prefix, suffix = tok.encode(QWEN3_PREFIX, add_special_tokens=False), tok.encode(QWEN3_SUFFIX, add_special_tokens=False)
    prompt = f"<Instruct>: {SKILLCORPUS_RERANK}\n\n<Query>: {TASK}\n\n{doc}"
    body = tok(prompt, padding=False, truncation=True, max_length=96 - len(prefix) - len(suffix), return_attention_mask=False)
    assert _causal_rows(scorer, [TASK], [doc]) == [prefix + body["input_ids"] + suffix]


def test_skillrouter_recipe_says_what_the_paper_trained():
    """recipe=skillrouter: the Qwen3 0.6B bases, lr 2e-5 (encoder) / 1e-5 (reranker), 1 epoch, listwise on the
    top-20, false-negative filter on; a CPU swaps only the bases and keeps the recipe."""
    for cfg in (_cfg("recipe=skillrouter"), _cfg("recipe=skillrouter", "encoder@encoder.base=minilm",
                                                  "reranker@reranker.base=minilm_ce")):
        assert (cfg.encoder.kind, cfg.reranker.kind, cfg.loss.name, cfg.fn_filter.enabled) == ("trained", "trained", "listwise", True)
        assert (cfg.encoder.train.lr, cfg.encoder.train.epochs, cfg.reranker.train.lr, cfg.reranker.train.epochs) == (2e-5, 1, 1e-5, 1)
        assert cfg.reranker.candidates == 20
    assert _cfg("recipe=skillrouter").encoder.base.model == "Qwen/Qwen3-Embedding-0.6B"
    assert _cfg("recipe=skillrouter").reranker.base.model == "Qwen/Qwen3-Reranker-0.6B"


@pytest.mark.parametrize(("encoder_base", "reranker_base", "rates"), [
    ("minilm", "minilm_ce", (5e-5, 2e-4)),                         # ours, for the CPU default on the built-in data
    ("qwen3_emb_0.6b", "qwen3_rank_0.6b", (2e-5, 1e-5)),          # SkillRouter's
    ("skillret_emb_8b", "skillrouter_rank_0.6b", (2e-5, 1e-5)),   # released checkpoints fine-tuned further
])
def test_trained_presets_take_their_rate_from_the_base(encoder_base, reranker_base, rates):
    """encoder=trained / reranker=trained train at the base preset's fine_tune_lr (the papers' rate for a Qwen3
    base), so swapping the base alone follows the paper; an explicit lr still wins. Their epochs are a maximum that
    early stopping on the dev split cuts short (the recipes, with no dev split of the papers', train one epoch)."""
    cfg = _cfg("encoder=trained", f"encoder@encoder.base={encoder_base}", "reranker=trained",
               f"reranker@reranker.base={reranker_base}")
    assert (cfg.encoder.train.lr, cfg.reranker.train.lr) == rates
    assert (cfg.encoder.train.epochs, cfg.reranker.train.epochs) == (3, 4)
    assert cfg.encoder.train.early_stopping.patience == cfg.reranker.train.early_stopping.patience == 1
    assert _cfg("encoder=trained", "encoder.train.lr=1e-3").encoder.train.lr == 1e-3


@pytest.mark.parametrize(("reranker_base", "attention"), [
    ("minilm_cosine", "eager"), ("minilm_ce", "eager"),             # MiniLM: eager is faster at its few hundred tokens
    ("qwen3_rank_0.6b", None), ("skillrouter_rank_0.6b", None), ("skillcorpus_rank_0.6b", None),  # their own (SDPA)
])
def test_a_trained_reranker_trains_with_its_bases_attention(reranker_base, attention):
    """reranker=trained's attention while training follows the base (train_attention): eager for MiniLM, where a CPU
    step measured 1.22x faster; a Qwen3 base keeps its own SDPA/flash attention, since eager would hold every layer's
    full attention matrices at 4,096 tokens. Neither training keeps hidden dropout; the encoder keeps its attention."""
    cfg = _cfg("encoder=trained", "reranker=trained", f"reranker@reranker.base={reranker_base}")
    assert cfg.reranker.train.attention_implementation == attention
    assert cfg.reranker.train.hidden_dropout == cfg.encoder.train.hidden_dropout == 0.0
    assert cfg.encoder.train.attention_implementation is None
    assert _cfg("recipe=skillrouter").reranker.train.attention_implementation is None
