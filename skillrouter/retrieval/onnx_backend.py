"""A CPU backend for any sentence-transformers encoder: a ``torch.onnx`` export run by ONNX Runtime,
optionally int8-quantised (dynamic quantisation of the linear layers).

Why not sentence-transformers' own ``backend="onnx"``: it needs optimum, whose releases clash with
our pinned transformers (see the platform notes); the export below needs only ``onnx`` and
``onnxruntime``. The tokenizer, max length and text handling stay the sentence-transformers model's.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

INPUTS = ("input_ids", "attention_mask")


def export(model, out_path: Path) -> Path:
    """Export ``model`` (tokenised ids + mask -> unit-norm sentence embedding) to ONNX."""
    import torch

    class Embed(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, input_ids, attention_mask):
            emb = self.st({"input_ids": input_ids, "attention_mask": attention_mask})["sentence_embedding"]
            return torch.nn.functional.normalize(emb, dim=-1)

    example = model.preprocess(["an example sentence to trace", "a second, longer example sentence to trace the graph"])
    args = tuple(example[k].cpu() for k in INPUTS)
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "embedding": {0: "batch"}}
    wrapped = Embed(model.cpu().float()).eval()  # fp32 whatever it was loaded as (bf16 on CUDA): ORT's CPU graph
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes on shape checks that hold for every input
        torch.onnx.export(wrapped, args, str(out_path), input_names=list(INPUTS), output_names=["embedding"],
                          dynamic_axes=dynamic, opset_version=17, dynamo=False)
    return out_path


def quantize(src: Path, dst: Path, per_channel: bool = False, keep_float: str | None = None) -> Path:
    """Dynamic int8 quantisation of the linear layers' weights (``per_channel``: one scale per output channel;
    ``keep_float``: a regular expression of the node names left in float)."""
    import re

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    exclude = [n.name for n in onnx.load(str(src)).graph.node if keep_float and re.search(keep_float, n.name)]
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel, nodes_to_exclude=exclude)
    return dst


def threads() -> int:
    """The cores this process may use: ``OMP_NUM_THREADS`` where set (a SLURM job's allocation, a test worker's
    share), else the CPUs it is allowed to run on."""
    return int(os.environ.get("OMP_NUM_THREADS", 0)) or len(os.sched_getaffinity(0))


def session(onnx_path: str | Path):
    """An ONNX Runtime session on the CPU with one thread per allowed core inside an operator and one operator at a
    time (the graphs are chains: parallel operators would only contend for the same cores)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """A SentenceTransformer's embeddings run by ONNX Runtime on the CPU: :func:`skillrouter.retrieval.dense.encode`
    tokenises and batches (the model's own tokenizer and max length, ``st``) and hands each padded batch to
    :meth:`run`."""

    def __init__(self, onnx_path: str | Path, st_model):
        self.session = session(onnx_path)
        self.st = st_model
        self.max_seq_length = st_model.max_seq_length

    def run(self, features: dict) -> np.ndarray:
        """A padded batch's features (torch tensors) -> unit-norm float32 embeddings."""
        return self.session.run(None, {k: features[k].numpy() for k in INPUTS})[0]
