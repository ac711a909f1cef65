"""Attention on more than one device: context, tensor and sequence parallelism on torch.distributed.

Every function here runs on each rank of a process group: gloo on CPU processes in this book; the
calls are the ``torch.distributed`` operations a cluster makes with NCCL (point-to-point sends
grouped with ``batch_isend_irecv``, ``all_to_all_single``), not run on NCCL here; only
:func:`launch` is tied to gloo and this machine. Notation as in book/notation.md, plus two degrees:
t ranks of tensor (and sequence) parallelism, c ranks of context parallelism.

* :mod:`.ring`: :func:`ring_attention` (context parallelism). Rank r holds a slice of the
  sequence; the key and value slices travel around the ring of ranks, each rank merges its partial
  results with their logsumexp (online softmax), and the backward pass (a custom autograd function)
  sends K, V and the dK, dV accumulators around the same ring, each accumulator transfer posted
  before the next step's compute and waited on after it. ``layout="zigzag"`` balances the
  causal work (each rank holds one early and one late chunk).
* :mod:`.ulysses`: :func:`ulysses_attention` (all-to-all context parallelism, DeepSpeed-Ulysses):
  each rank holds a slice of the sequence for every head; an all-to-all trades it for every token
  of H/c heads, attention runs on them, and a second all-to-all trades back.
* :mod:`.tensor`: :class:`TensorParallelBlock` (Megatron style), an attention + FFN block split by
  columns and rows over t ranks, with ``sequence_parallel=True`` the norms and the residual
  stream split along N; :class:`ReferenceBlock` is the same block in one process.
* :mod:`.ledger`: what each rank saves for backward and sends per layer, as SymPy expressions
  (:func:`tp_ledger_exprs`, :func:`cp_ledger_exprs`, :func:`comm_exprs`, :func:`korthikanti_exprs`;
  SymPy is imported only inside them; the context-parallel ones are :mod:`attn_core.formulas.parallel`'s)
  and the plain functions that evaluate them (:func:`tp_ledger`, :func:`cp_ledger`, :func:`comm_bytes`,
  :func:`evaluate`).
* :mod:`.comm`: every tensor a rank sends goes through one of two functions (point to point, posted
  with ``batch_isend_irecv``, or all-to-all), which count its bytes (:func:`record_comm`); the
  collectives are rings of point-to-point sends.
* :mod:`.links`: :data:`LINKS`, published latency and bandwidth of NVLink and InfiniBand, for the
  time model of :func:`attn_core.formulas.ring_step`.
* :mod:`.processes`: :func:`launch` starts ``size`` processes on this machine (spawn, gloo, 127.0.0.1), runs
  an importable function on every rank and returns the results; a rank that fails or hangs is
  killed and reported, never waited on forever.
* :mod:`.workers`: the experiments of chapter 11, ``tests/test_parallel.py`` and
  ``bench/parallel.py`` (``worker_*``).
"""

from .comm import CommLog, all_gather, all_reduce, record_comm, reduce_scatter
from .ledger import (
    KORTHIKANTI_LETTERS,
    TP_SPLIT_ITEMS,
    comm_bytes,
    comm_exprs,
    cp_ledger,
    cp_ledger_exprs,
    evaluate,
    korthikanti_exprs,
    kv_cache_shard_exprs,
    per_rank_activations,
    to_paper_letters,
    tp_ledger,
    tp_ledger_exprs,
    tp_weight_exprs,
)
from .links import LINKS
from .processes import launch
from .ring import LAYOUTS, chunk_ids, ring_attention, ring_attention_stats, shard_sequence, unshard_sequence
from .tensor import ReferenceBlock, TensorParallelBlock
from .ulysses import ulysses_attention
from .workers import (
    ring_inputs,
    worker_ring,
    worker_ring_timing,
    worker_suite,
    worker_tp,
    worker_ulysses,
)

__all__ = [
    "LAYOUTS",
    "CommLog",
    "record_comm",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "chunk_ids",
    "shard_sequence",
    "unshard_sequence",
    "ring_attention",
    "ring_attention_stats",
    "ulysses_attention",
    "ReferenceBlock",
    "TensorParallelBlock",
    "tp_ledger_exprs",
    "tp_weight_exprs",
    "cp_ledger_exprs",
    "kv_cache_shard_exprs",
    "comm_exprs",
    "korthikanti_exprs",
    "KORTHIKANTI_LETTERS",
    "to_paper_letters",
    "evaluate",
    "tp_ledger",
    "cp_ledger",
    "comm_bytes",
    "TP_SPLIT_ITEMS",
    "per_rank_activations",
    "launch",
    "LINKS",
    "ring_inputs",
    "worker_ring",
    "worker_ring_timing",
    "worker_tp",
    "worker_suite",
    "worker_ulysses",
]
