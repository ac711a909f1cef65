"""What a rank sends, counted: point-to-point exchange, all-to-all, and the ring collectives.

Every tensor a rank sends goes through :func:`_exchange` (point to point) or :func:`_all_to_all`,
which add its bytes to the active :class:`CommLog` (:func:`record_comm`). The collectives are rings
of point-to-point sends: an all-gather or a reduce-scatter over t ranks sends (t - 1)/t of the
tensor's bytes per rank in t - 1 steps, an all-reduce (one of each) 2 (t - 1)/t.

Each exchange posts its send and its receive together, with ``torch.distributed.batch_isend_irecv``:
on NCCL a send and a receive that must progress at the same time have to be in one group
(``ncclGroupStart`` / ``ncclGroupEnd``), or two ranks that each send first can wait on each other
forever; ``batch_isend_irecv`` is that group. Gloo (the backend this book runs) does not coalesce
and posts the operations one by one, which it may: its sends do not wait for the receive.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class CommLog:
    """Bytes this rank sent, one entry per send: ``(what, nbytes)``."""

    sends: list[tuple[str, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.sends)

    def by_op(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for what, n in self.sends:
            out[what] = out.get(what, 0) + n
        return out


_LOGS: list[CommLog] = []  # the active logs (nested record_comm blocks all count)


@contextmanager
def record_comm():
    """``with record_comm() as log:`` counts every byte this rank sends inside the block."""
    log = CommLog()
    _LOGS.append(log)
    try:
        yield log
    finally:
        _LOGS.remove(log)


def _group(group):
    """(rank, size) of ``group`` (None = the default group); ValueError if none is initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "group: no initialized torch.distributed process group; call "
            "torch.distributed.init_process_group first (or attn_core.parallel.launch)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _peer(group, rank: int) -> int:
    """The global rank of ``rank`` in ``group`` (isend/irecv address global ranks)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def _record(what: str, nbytes: int) -> None:
    """Add ``nbytes`` sent as ``what`` to every active :class:`CommLog`."""
    for log in _LOGS:
        log.sends.append((what, int(nbytes)))


def _exchange(what: str, send: torch.Tensor | None, dst: int, recv: torch.Tensor | None, src: int,
              group, tag: int):
    """Start sending ``send`` to ``dst`` and receiving ``recv`` from ``src``; return the requests.

    Both are posted as one batch (``torch.distributed.batch_isend_irecv``: one NCCL group, so
    neither can block the other). Each send is recorded in the active :class:`CommLog`.
    """
    ops = []
    if send is not None:
        send = send.contiguous()
        _record(what, send.numel() * send.element_size())
        ops.append(dist.P2POp(dist.isend, send, _peer(group, dst), group=group, tag=tag))
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, recv, _peer(group, src), group=group, tag=tag))
    return dist.batch_isend_irecv(ops) if ops else []


def _all_to_all(x: torch.Tensor, scatter_dim: int, scatter_sizes: list[int], gather_dim: int,
                gather_sizes: list[int], group, what: str) -> torch.Tensor:
    """All-to-all: piece j of ``x`` along ``scatter_dim`` (``scatter_sizes[j]`` long) goes to rank j;
    the pieces received from ranks 0, 1, ... (``gather_sizes[i]`` long along ``gather_dim``) are
    concatenated along ``gather_dim``.

    One ``torch.distributed.all_to_all_single`` on flat buffers, so pieces may differ in size. The
    bytes recorded are those of the pieces addressed to other ranks: what leaves this rank (its own
    piece stays, as in NCCL's all-to-all).
    """
    r, size = _group(group)
    pieces = [p.contiguous() for p in x.split(list(scatter_sizes), dim=scatter_dim)]
    _record(what, sum(p.numel() * p.element_size() for j, p in enumerate(pieces) if j != r))
    shapes = []
    for n in gather_sizes:  # the shape of the piece each rank sends here
        shape = list(pieces[r].shape)
        shape[gather_dim] = n
        shapes.append(shape)
    numels = [int(torch.Size(s).numel()) for s in shapes]
    out = x.new_empty(sum(numels))
    dist.all_to_all_single(out, torch.cat([p.reshape(-1) for p in pieces]), output_split_sizes=numels,
                           input_split_sizes=[p.numel() for p in pieces], group=group)
    return torch.cat([f.view(s) for f, s in zip(out.split(numels), shapes)], dim=gather_dim)


def _wait(reqs) -> None:
    for req in reqs:
        req.wait()


def _ring_reduce_scatter(chunks: list[torch.Tensor], group, what: str) -> torch.Tensor:
    """Sum chunk i over all ranks onto rank i, passing partial sums around the ring (t - 1 steps)."""
    r, t = _group(group)
    acc = [c.clone() for c in chunks]
    for s in range(t - 1):
        i_send, i_recv = (r - s - 1) % t, (r - s - 2) % t
        buf = torch.empty_like(acc[i_recv])
        _wait(_exchange(what, acc[i_send], (r + 1) % t, buf, (r - 1) % t, group, tag=s))
        acc[i_recv] += buf
    return acc[r]


def _ring_all_gather(mine: torch.Tensor, shapes: list[torch.Size], group, what: str) -> list[torch.Tensor]:
    """Every rank ends with every rank's chunk; rank r forwards what it last received (t - 1 steps)."""
    r, t = _group(group)
    out = [None] * t
    out[r] = mine
    for s in range(t - 1):
        i_send, i_recv = (r - s) % t, (r - s - 1) % t
        buf = torch.empty(shapes[i_recv], dtype=mine.dtype, device=mine.device)
        _wait(_exchange(what, out[i_send], (r + 1) % t, buf, (r - 1) % t, group, tag=s))
        out[i_recv] = buf
    return out


def all_reduce(x: torch.Tensor, group=None, what: str = "all_reduce") -> torch.Tensor:
    """The sum of ``x`` over all ranks (a new tensor): ring reduce-scatter, then ring all-gather.

    Sends 2 (t - 1)/t of x's bytes per rank when x.numel() is a multiple of t.
    """
    r, t = _group(group)
    if t == 1:
        return x.clone()
    chunks = list(x.reshape(-1).tensor_split(t))  # t flat pieces, sizes differ by at most one
    mine = _ring_reduce_scatter(chunks, group, what)
    parts = _ring_all_gather(mine, [c.shape for c in chunks], group, what)
    return torch.cat(parts).reshape(x.shape)


def all_gather(x: torch.Tensor, dim: int, group=None, what: str = "all_gather") -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (all ranks' shapes equal): sends (t - 1)/t."""
    r, t = _group(group)
    parts = _ring_all_gather(x.contiguous(), [x.shape] * t, group, what)
    return torch.cat(parts, dim=dim)


def reduce_scatter(x: torch.Tensor, dim: int, group=None, what: str = "reduce_scatter") -> torch.Tensor:
    """Sum ``x`` over ranks and keep this rank's slice along ``dim`` (size divisible by t)."""
    r, t = _group(group)
    chunks = [c.contiguous() for c in x.chunk(t, dim=dim)]
    return _ring_reduce_scatter(chunks, group, what)


def _gather_meta(local: dict, group) -> list[dict]:
    """Every rank's small description of its input (a handful of bytes, not counted as traffic)."""
    _, size = _group(group)
    out = [None] * size
    dist.all_gather_object(out, local, group=group)
    return out
