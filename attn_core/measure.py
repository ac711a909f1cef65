"""Measure what the formulas predict: saved tensors, FLOPs and time.

* :func:`saved_tensor_bytes` records every tensor autograd saves for the
  backward pass (through ``torch.autograd.graph.saved_tensors_hooks``),
  counts each storage once, and labels it with the graph node that saved it.
  On the meta device tensors have shapes and dtypes but no data, so a layer
  at N = 32768 is "run" in milliseconds.
* :func:`count_flops` wraps ``torch.utils.flop_counter.FlopCounterMode``.
* :func:`time_fn` is a median wall-clock timer; :func:`time_interleaved` times several functions
  side by side (their calls interleaved, so a busy machine slows all of them alike), with the page
  faults of each call where the system counts them.
* :func:`step_memory` tracks one training step (forward, backward, optimizer step) with PyTorch's
  own memory tracker on fake tensors: the running peak after each phase and what makes it up.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = [
    "SavedTensor",
    "SavedTensors",
    "saved_tensor_bytes",
    "count_flops",
    "flops_by_op",
    "time_fn",
    "page_faults",
    "time_interleaved",
    "step_memory",
]


@dataclass(frozen=True)
class SavedTensor:
    """One storage kept alive for backward.

    shape, dtype: of the first tensor saved on this storage; nbytes: the
    storage's size (what stays in memory, even if only a view was saved);
    saved_by: the autograd nodes and fields that hold it, e.g.
    ``("SoftmaxBackward0.result",)``; is_leaf: a leaf tensor that requires
    grad (a weight, or an input the caller marked), not an activation.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    saved_by: tuple[str, ...]
    is_leaf: bool


@dataclass(frozen=True)
class SavedTensors:
    """What autograd saved: the storages, in the order they were first saved."""

    tensors: tuple[SavedTensor, ...]

    @property
    def total(self) -> int:
        """Bytes of all unique saved storages."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def activations(self) -> int:
        """Bytes of saved storages that are not leaves (weights excluded)."""
        return sum(t.nbytes for t in self.tensors if not t.is_leaf)

    def __len__(self) -> int:
        return len(self.tensors)

    def __iter__(self):
        return iter(self.tensors)

    def table(self) -> str:
        """A plain-text table, one row per storage; a node saving it n times shows as "x n"."""
        labels = []
        for t in self.tensors:
            counts = {name: t.saved_by.count(name) for name in dict.fromkeys(t.saved_by)}
            who = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items()) or "?"
            labels.append(who + (" (leaf)" if t.is_leaf else ""))
        shapes = [str(list(t.shape)) for t in self.tensors]
        w1 = max([len("saved by"), *map(len, labels)]) + 2
        w2 = max([len("shape"), *map(len, shapes)]) + 2
        rows = [f"{'saved by':<{w1}}{'shape':<{w2}}{'dtype':<16}{'bytes':>16}"]
        for t, who, shape in zip(self.tensors, labels, shapes):
            rows.append(f"{who:<{w1}}{shape:<{w2}}{str(t.dtype):<16}{t.nbytes:>16,}")
        rows.append(f"{'total':<{w1 + w2 + 16}}{self.total:>16,}")
        return "\n".join(rows)


def _storage_key(t: torch.Tensor) -> int:
    # the address of the C++ StorageImpl: unique per storage, also on the meta device
    return t.untyped_storage()._cdata


def _graph_labels(outputs) -> dict[int, list[str]]:
    """storage key -> ["NodeName.field", ...] for every saved tensor in the graph."""
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    stack = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen, labels = set(), {}
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                val = getattr(node, attr)
            except Exception:  # a field that cannot be read back; the hook saw it anyway
                continue
            for t in val if isinstance(val, (tuple, list)) else (val,):
                if isinstance(t, torch.Tensor):
                    labels.setdefault(_storage_key(t), []).append(f"{node.name()}.{attr[len('_saved_'):]}")
        stack.extend(fn for fn, _ in node.next_functions)
    return labels


def saved_tensor_bytes(fn: Callable, *args, **kwargs) -> SavedTensors:
    """Run ``fn(*args, **kwargs)`` and report the tensors autograd saves for backward.

    Each storage is counted once however many nodes save it or views of it.
    Works on any device; on ``torch.device("meta")`` no memory is allocated,
    so any N costs milliseconds. Returns :class:`SavedTensors` (``.total``
    bytes, ``.activations`` bytes without leaves, and the per-tensor list).
    """
    first: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor):
        first.setdefault(_storage_key(t), t)  # keeps t alive, so keys stay unique
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)
    labels = _graph_labels(out)
    tensors = tuple(
        SavedTensor(
            shape=tuple(t.shape),
            dtype=t.dtype,
            nbytes=t.untyped_storage().nbytes(),
            saved_by=tuple(labels.get(key, ())),
            is_leaf=t.is_leaf and t.requires_grad,
        )
        for key, t in first.items()
    )
    return SavedTensors(tensors)


# FlopCounterMode knows the out-of-place GEMMs; count their in-place forms (y.baddbmm_(a, b),
# y += a @ b without a temporary) the same way.
def _baddbmm_flop(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    (batch, m, k), n = a_shape, b_shape[-1]
    return 2 * batch * m * k * n


def _addmm_flop(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    (m, k), n = a_shape, b_shape[-1]
    return 2 * m * k * n


_IN_PLACE_GEMMS = {torch.ops.aten.baddbmm_: _baddbmm_flop, torch.ops.aten.addmm_: _addmm_flop}


def count_flops(fn: Callable, *args, **kwargs) -> int:
    """FLOPs of ``fn(*args, **kwargs)`` as counted by PyTorch's ``FlopCounterMode``.

    It counts matmul-like ops (mm, bmm, addmm, convolutions, and here also the in-place
    ``baddbmm_`` and ``addmm_``) at 2 FLOPs per multiply-accumulate, and nothing else.
    Scaled dot-product attention is counted only on a path the counter knows: the math path
    (the meta device, or 3-D inputs on a CPU); PyTorch's fused CPU kernel for 4-D inputs
    counts 0. Works on the meta device.
    """
    with FlopCounterMode(display=False, custom_mapping=_IN_PLACE_GEMMS) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def flops_by_op(fn: Callable, *args, **kwargs) -> dict[str, int]:
    """Like :func:`count_flops`, split by ATen op name (e.g. ``{"mm": ..., "bmm": ...}``)."""
    with FlopCounterMode(display=False, custom_mapping=_IN_PLACE_GEMMS) as counter:
        fn(*args, **kwargs)
    per_op = counter.get_flop_counts().get("Global", {})
    return {str(op).split(".")[-1] if "." in str(op) else str(op): int(n) for op, n in per_op.items()}


def time_fn(fn: Callable, *args, repeats: int = 5, warmup: int = 1, **kwargs) -> float:
    """Median wall-clock seconds of ``fn(*args, **kwargs)`` over ``repeats`` runs.

    ``warmup`` untimed runs come first (allocator, caches, lazy init).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    for _ in range(warmup):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def page_faults() -> int | None:
    """Minor page faults of this process so far (fresh pages the kernel handed over), or None where
    the system does not count them (Python's ``resource`` module is Unix only)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_interleaved(fns: dict, repeats: int = 5, number: int = 1, warmup: int = 1,
                     faults: dict | None = None) -> dict[str, float]:
    """Median seconds per call of each zero-argument function of ``fns``, the calls interleaved.

    Round robin: every repeat calls each function once (``number`` times back to back, for
    microsecond-scale work), so a machine that slows down in the middle slows every function alike
    and their ratios stay meaningful. If a dict is given as ``faults``, it receives each function's
    median page faults per call (None where the system does not count them).
    """
    for name, value in (("repeats", repeats), ("number", number)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for f in fns.values():
        for _ in range(warmup):
            f()
    seconds = {name: [] for name in fns}
    minflt = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            before = page_faults()
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            seconds[name].append((time.perf_counter() - t0) / number)
            if before is not None:
                minflt[name].append((page_faults() - before) / number)
    if faults is not None:
        faults.update({name: statistics.median(m) if m else None for name, m in minflt.items()})
    return {name: statistics.median(s) for name, s in seconds.items()}


def step_memory(build: Callable, inputs: Callable, *, later: bool = False) -> dict:
    """Track one training step with ``torch.distributed._tools.mem_tracker.MemTracker`` on fake tensors.

    ``build()`` returns ``(module, optimizer)`` and ``inputs()`` the module's input; both are called
    inside ``FakeTensorMode``, so any size costs no memory. The step is forward, ``.sum().backward()``,
    ``optimizer.step()`` and ``zero_grad()``; with ``later=True`` one untracked step runs first, so
    that the optimizer's state exists from the start (the steady state of training). Returns
    ``{"running": {phase: the running peak after it, bytes}, "after_forward": {category: bytes},
    "peak": {category: bytes at the peak}, "phase": the first phase whose running peak is the
    step's, "params": the module's parameter count, "tensors": its parameter tensors}``; categories
    as MemTracker names them (PARAM,
    BUFFER, GRAD, ACT, TEMP, OPT, OTH, Total), on the CPU.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    def snapshot(mt, kind="current"):
        snap = mt.get_tracker_snapshot(kind).get(torch.device("cpu"), {})
        return {str(k).split(".")[-1]: v for k, v in snap.items()}

    with FakeTensorMode():
        module, optimizer = build()
        x = inputs()
        if later:
            module(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        mt, running = MemTracker(), {}
        mt.track_external(module, optimizer)
        with mt:
            out = module(x)
            after_forward, running["forward"] = snapshot(mt), snapshot(mt, "peak")["Total"]
            out.sum().backward()
            running["backward"] = snapshot(mt, "peak")["Total"]
            optimizer.step()
            optimizer.zero_grad()
            running["optimizer step"] = snapshot(mt, "peak")["Total"]
        peak = snapshot(mt, "peak")
        params = sum(p.numel() for p in module.parameters())
        tensors = len(list(module.parameters()))
    phase = next(name for name, value in running.items() if value == peak["Total"])
    return {"running": running, "after_forward": after_forward, "peak": peak, "phase": phase,
            "params": params, "tensors": tensors}

