"""The pre-norm transformer block the block ledger counts, and its measurement.

Chapter 5 counts one attention core. A training step keeps more: the norms, the projections'
inputs, the FFN's hidden activations and the residual dropouts' masks.
:func:`attn_core.ledger.block_ledger` counts every tensor a pre-norm block keeps for backward,
item by item, in bytes::

    h   = x + dropout(O(attention(Q, K, V)))       Q, K, V = projections of norm1(x)
    out = h + dropout(FFN(norm2(h)))

and :class:`TransformerBlock` is that block, written so each item is one real tensor.
:func:`measure_block` runs it on the meta device and reports which of its tensors are still
alive once the forward has returned (held by autograd, or by a checkpoint for recomputation),
by item: ``tests/test_block_ledger.py`` checks ledger == measurement over a grid.

Options (the signature of :func:`attn_core.ledger.block_ledger`):

* ``num_kv_heads`` H_kv (GQA / MQA: K and V have H_kv heads; queries share them in groups);
* ``ffn``: ``"gelu"`` (d -> F -> d, GeLU between) or ``"swiglu"`` (down(silu(gate) * up));
  ``ffn_dim`` F (default 4d);
* ``norm``: ``"layernorm"`` (saves its input and a mean and rstd per token: float32 on a GPU and on
  the meta device; the CPU kernel keeps them in the dtype of 16-bit weights) or
  ``"rmsnorm"`` (PyTorch's ``F.rms_norm``, which in 16-bit upcasts to float32 and saves the
  float32 input, the float32 normalized tensor and rstd);
* ``dropout``: attention dropout on P and dropout on both residual branches, with masks of
  ``mask_bytes`` (None: the dtype's bytes, the multiplier PyTorch's CPU dropout saves; 1: a bool
  mask, as CUDA's fused dropout keeps);
* ``attention``: ``"eager"`` (S, P, dropout as separate tensors) or ``"fused"`` (FlashAttention:
  no N x N tensor, a float32 logsumexp per query and head; its dropout is regenerated from the
  RNG, no mask is kept);
* ``recompute``: ``"none"``; ``"selective"`` (the attention core, Q K^T, softmax, dropout, P V,
  is recomputed in backward: Korthikanti et al.'s choice); ``"full"`` (only the block's input
  is kept, the whole block is recomputed).

Under Korthikanti et al. (2022)'s assumptions (16-bit values, a 4d GeLU MLP, LayerNorm, dropout
with 1-byte masks, eager attention) the items add up to their 34 s b h + 5 a s^2 b bytes (s = N,
b = B, h = d, a = H in the paper's letters) once the norms' per-token statistics (which the
paper leaves out as small) are set aside; 34 s b h with selective and 2 s b h with full
recomputation.
"""

from __future__ import annotations

import gc
import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .ledger import BLOCK_ITEMS, _check_block_args
from .measure import _graph_labels

__all__ = [
    "TransformerBlock",
    "measure_block",
    "block_saved_by",
    "measure_block_flops",
]

_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------- the real block
def _dropout(x: torch.Tensor, p: float, bool_mask: bool) -> torch.Tensor:
    """Dropout; ``bool_mask=True`` keeps a 1-byte mask (as CUDA's fused dropout does) on any device."""
    if p == 0:
        return x
    if not bool_mask:
        return F.dropout(x, p, training=True)  # CPU/meta: saves a multiplier in x's dtype
    keep = torch.rand_like(x) >= p  # (..) bool
    return (x * keep) * (1.0 / (1.0 - p))  # the product saves keep; a Python scalar saves nothing


class TransformerBlock(nn.Module):
    """A pre-norm transformer block whose every saved tensor is an item of :func:`block_ledger`.

    ``TransformerBlock(d_model, H, num_kv_heads=None, ffn="gelu", ffn_dim=None, norm="layernorm",
    dropout_p=0.1, attention="eager", recompute="none", bool_mask=False, device=None, dtype=None)``

    forward(x, tag=None): x (B, N, d) -> (B, N, d). ``tag(name, tensor)``, if given, is called
    with each item's tensor (how :func:`measure_block` names what stays alive). Grouped-query
    attention folds each group of H / H_kv query heads into the rows of one K/V head, so no K or V
    is repeated: Q (B, H_kv, G N, D) against K (B, H_kv, N, D).
    """

    def __init__(self, d_model: int, H: int, num_kv_heads: int | None = None, ffn: str = "gelu",
                 ffn_dim: int | None = None, norm: str = "layernorm", dropout_p: float = 0.1,
                 attention: str = "eager", recompute: str = "none", bool_mask: bool = False,
                 device=None, dtype=None):
        super().__init__()
        _, _, d, H, H_kv, Fw, _, _ = _check_block_args(1, 1, d_model, H, num_kv_heads, ffn, ffn_dim, norm,
                                                       attention, None, recompute, "bf16")
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
        self.d, self.H, self.H_kv, self.D = d, H, H_kv, d // H
        self.ffn, self.norm, self.attention, self.recompute = ffn, norm, attention, recompute
        self.p, self.bool_mask = float(dropout_p), bool(bool_mask)
        kw = dict(device=device, dtype=dtype)
        self.norm1 = (nn.LayerNorm(d, **kw) if norm == "layernorm" else nn.RMSNorm(d, **kw))
        self.norm2 = (nn.LayerNorm(d, **kw) if norm == "layernorm" else nn.RMSNorm(d, **kw))
        self.w_q = nn.Linear(d, H * self.D, bias=False, **kw)
        self.w_k = nn.Linear(d, H_kv * self.D, bias=False, **kw)
        self.w_v = nn.Linear(d, H_kv * self.D, bias=False, **kw)
        self.w_o = nn.Linear(H * self.D, d, bias=False, **kw)
        self.up = nn.Linear(d, Fw, bias=False, **kw)
        self.gate = nn.Linear(d, Fw, bias=False, **kw) if ffn == "swiglu" else None
        self.down = nn.Linear(Fw, d, bias=False, **kw)

    # the attention core: Q K^T, softmax, dropout, P V (what "selective" recomputes)
    def _core(self, q, k, v, tag=None):
        """q (B, H_kv, G N, D), k, v (B, H_kv, N, D) -> (B, H_kv, G N, D) (eager), or the fused
        kernel on q (B, H, N, D) and k, v (B, H_kv, N, D) -> (B, H, N, D)."""
        if self.attention == "fused":
            # PyTorch's CPU FlashAttention kernel (also on the meta device); no dropout on CPU
            out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
            return out
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.D))  # (B, H_kv, G N, N) scores S
        p = torch.softmax(s, dim=-1)  # (B, H_kv, G N, N) weights P
        if tag:
            tag("P", p)
        if self.p > 0:
            p = _dropout(p, self.p, self.bool_mask)
            if tag:
                tag("P_drop", p)
        return p @ v  # (B, H_kv, G N, D)

    def forward(self, x: torch.Tensor, tag=None) -> torch.Tensor:
        if self.recompute == "full":
            return torch.utils.checkpoint.checkpoint(self._forward, x, None, use_reentrant=False)
        return self._forward(x, tag)

    def _forward(self, x, tag=None):
        t = tag or (lambda name, tensor: None)
        B, N, _ = x.shape
        H, H_kv, D = self.H, self.H_kv, self.D
        G = H // H_kv
        t("X", x)
        a = self.norm1(x)  # (B, N, d)
        t("norm1.out", a)
        if self.attention == "eager":
            # (B, N, H D) -> (B, H_kv, G, N, D) -> (B, H_kv, G N, D): each K/V head with its G queries
            q = self.w_q(a).view(B, N, H_kv, G, D).permute(0, 2, 3, 1, 4).reshape(B, H_kv, G * N, D)
            k = self.w_k(a).view(B, N, H_kv, D).transpose(1, 2).contiguous()  # (B, H_kv, N, D)
            v = self.w_v(a).view(B, N, H_kv, D).transpose(1, 2).contiguous()  # (B, H_kv, N, D)
        else:
            q = self.w_q(a).view(B, N, H, D).transpose(1, 2)  # (B, H, N, D), a view
            k = self.w_k(a).view(B, N, H_kv, D).transpose(1, 2)  # (B, H_kv, N, D)
            v = self.w_v(a).view(B, N, H_kv, D).transpose(1, 2)  # (B, H_kv, N, D)
        t("Q", q)
        t("K", k)
        t("V", v)
        if self.recompute == "selective":
            context = partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, _recompute_all)
            o = torch.utils.checkpoint.checkpoint(self._core, q, k, v, use_reentrant=False,
                                                  context_fn=context)
        else:
            o = self._core(q, k, v, tag)
        if self.attention == "eager":
            # (B, H_kv, G N, D) -> (B, N, H_kv, G, D) -> (B, N, H D)
            ctx = o.view(B, H_kv, G, N, D).permute(0, 3, 1, 2, 4).reshape(B, N, H * D)
        else:
            ctx = o.transpose(1, 2).reshape(B, N, H * D)  # the kernel writes (B, N, H, D): a view
        t("ctx", ctx)
        h = x + self._branch_dropout(self.w_o(ctx), "attn_resid.mask", t)  # (B, N, d)
        t("h", h)
        c = self.norm2(h)
        t("norm2.out", c)
        if self.ffn == "gelu":
            u = self.up(c)  # (B, N, F)
            t("ffn.up", u)
            act = F.gelu(u)
        else:
            g = self.gate(c)  # (B, N, F)
            t("ffn.gate", g)
            sg = F.silu(g)
            t("ffn.silu", sg)
            u = self.up(c)
            t("ffn.up", u)
            act = sg * u
        t("ffn.act", act)
        return h + self._branch_dropout(self.down(act), "ffn_resid.mask", t)

    def _branch_dropout(self, y, name, t):
        if self.p == 0:
            return y
        if self.bool_mask:
            keep = torch.rand_like(y) >= self.p  # (B, N, d) bool
            t(name, keep)
            return (y * keep) * (1.0 / (1.0 - self.p))
        noise = torch.empty_like(y).bernoulli_(1 - self.p).div_(1 - self.p)  # what CPU dropout keeps
        t(name, noise)
        return y * noise


def _recompute_all(ctx, op, *args, **kwargs):
    """The selective-checkpoint policy of the attention core: recompute every op in it."""
    return torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE


# ------------------------------------------------------------------------------- measurement
class _Created(TorchDispatchMode):
    """Records the storage of every tensor an op creates on the meta device (weakly), the op, and
    the item the block tagged last (the region it was in)."""

    def __init__(self):
        super().__init__()
        self.region = ""
        self.refs: list[tuple[StorageWeakRef, int, str, str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "meta":
                s = t.untyped_storage()
                self.refs.append((StorageWeakRef(s), s.nbytes(), str(func), self.region, tuple(t.shape)))
        return out


def _untagged_name(region: str, op: str, shape: tuple) -> str:
    """The item of a storage the block could not tag itself (made inside a norm, dropout or kernel)."""
    if region in ("X", "h"):  # inside norm1 / norm2
        prefix = "norm1" if region == "X" else "norm2"
        if shape and shape[-1] == 1:
            return f"{prefix}.stats"  # mean / rstd, one per token
        return f"{prefix}.fp32_input" if "_to_copy" in op else f"{prefix}.normalized"
    if region == "P":
        return "attn_dropout.mask"  # made by the dropout on P
    if region == "V" and "flash_attention" in op:
        return "attn.lse"  # the fused kernel's second output
    return "untagged"


def _block_for(d_model, H, num_kv_heads, ffn, ffn_dim, norm, dropout, attention, mask_bytes, recompute,
               dtype, device="meta"):
    return TransformerBlock(d_model, H, num_kv_heads, ffn, ffn_dim, norm, 0.1 if dropout else 0.0,
                            attention, recompute, bool_mask=mask_bytes == 1, device=device,
                            dtype=_TORCH_DTYPES[dtype])


def measure_block(B: int, N: int, d_model: int, H: int, *, num_kv_heads: int | None = None,
                  ffn: str = "gelu", ffn_dim: int | None = None, norm: str = "layernorm",
                  dropout: bool = True, attention: str = "eager", mask_bytes: int | None = None,
                  recompute: str = "none", dtype: str = "bf16") -> dict[str, int]:
    """What a real :class:`TransformerBlock` keeps alive for backward, by item, measured on the meta device.

    Same arguments as :func:`block_ledger` (``mask_bytes`` None or 1: a multiplier in the dtype,
    as PyTorch's CPU dropout keeps, or a bool mask). The forward runs under a dispatch mode that
    records every storage it creates; once it has returned and every local reference is gone,
    the storages still alive are the ones autograd (or the checkpoint, for recomputation) keeps,
    and each is named by the item the block tagged it with. The block's output is left out (the
    next block's X). A storage alive but never tagged is reported as ``"untagged"``.
    """
    return _measure(B, N, d_model, H, num_kv_heads, ffn, ffn_dim, norm, dropout, attention, mask_bytes,
                    recompute, dtype)[0]


def _block_options(options: dict) -> dict:
    """block_ledger's keyword options with their defaults, updated by ``options`` (unknown names rejected)."""
    opts = dict(num_kv_heads=None, ffn="gelu", ffn_dim=None, norm="layernorm", dropout=True,
                attention="eager", mask_bytes=None, recompute="none", dtype="bf16")
    unknown = set(options) - set(opts)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; expected some of {sorted(opts)}")
    opts.update(options)
    return opts


def block_saved_by(B: int, N: int, d_model: int, H: int, **options) -> dict[str, str]:
    """Who keeps each item of :func:`measure_block` alive: the autograd nodes that saved it (e.g.
    ``"GeluBackward0.self"``), or ``"checkpoint"`` for what a recomputation keeps. Same options."""
    opts = _block_options(options)
    return _measure(B, N, d_model, H, *opts.values())[1]


def _measure(B, N, d_model, H, num_kv_heads, ffn, ffn_dim, norm, dropout, attention, mask_bytes, recompute,
             dtype):
    _check_block_args(B, N, d_model, H, num_kv_heads, ffn, ffn_dim, norm, attention, mask_bytes,
                      recompute, dtype)
    if mask_bytes not in (None, 1):
        raise ValueError(f"mask_bytes: measured only for None or 1, got {mask_bytes!r}")
    block = _block_for(d_model, H, num_kv_heads, ffn, ffn_dim, norm, dropout, attention, mask_bytes,
                       recompute, dtype)
    rec = _Created()
    names: list[tuple[StorageWeakRef, str]] = []

    def tag(name, t):
        names.append((StorageWeakRef(t.untyped_storage()), name))
        rec.region = name

    x_leaf = torch.empty(B, N, block.d, device="meta", dtype=_TORCH_DTYPES[dtype], requires_grad=True)
    with rec:
        x = x_leaf * 1  # the block's input: a non-leaf, as the previous block's output would be
        tag("X", x)
        out = block(x, tag)
    del x
    gc.collect()
    # not activations: the output (the next block's X), the weights and the leaf behind x
    skip = {out.untyped_storage()._cdata, x_leaf.untyped_storage()._cdata}
    skip |= {w.untyped_storage()._cdata for w in block.parameters()}
    label = {ref.cdata: name for ref, name in names if not ref.expired()}
    result = dict.fromkeys(BLOCK_ITEMS, 0)
    alive = []
    seen = set()
    for ref, nbytes, op, region, shape in rec.refs:
        key = ref.cdata
        if ref.expired() or key in skip or key in seen:
            continue
        seen.add(key)
        name = label.get(key) or _untagged_name(region, op, shape)
        result[name] = result.get(name, 0) + nbytes
        alive.append((key, name))
    # who holds each item (read after the measurement: reading a checkpointed node's saved tensors
    # recomputes them); the inputs of a recomputed region are held by the checkpoint itself
    graph = {} if recompute == "full" else _graph_labels(out)
    held = {"full": ("X",), "selective": ("Q", "K", "V"), "none": ()}[recompute]
    who: dict[str, str] = {}
    for key, name in alive:
        nodes = ("checkpoint (kept to recompute)" if name in held
                 else ", ".join(dict.fromkeys(graph.get(key, ()))) or "?")
        who[name] = nodes if name not in who else f"{who[name]}; {nodes}"
    del out
    return result, who


def measure_block_flops(B: int, N: int, d_model: int, H: int, **options) -> dict[str, int]:
    """Matmul FLOPs of one training step of the block (forward, then backward with any recomputation).

    Counted by PyTorch's ``FlopCounterMode`` on the meta device: ``{"forward": ..., "backward": ...}``;
    backward includes what the checkpoint of "selective" or "full" recomputes (it stops once every
    tensor backward needs is back: without dropout after the FFN, "full" skips the last matmul).
    """
    from torch.utils.flop_counter import FlopCounterMode

    opts = _block_options(options)
    _check_block_args(B, N, d_model, H, opts["num_kv_heads"], opts["ffn"], opts["ffn_dim"], opts["norm"],
                      opts["attention"], opts["mask_bytes"], opts["recompute"], opts["dtype"])
    block = _block_for(d_model, H, **opts)
    x = torch.empty(B, N, block.d, device="meta", dtype=_TORCH_DTYPES[opts["dtype"]], requires_grad=True)
    with FlopCounterMode(display=False) as fwd:
        out = block(x)
    with FlopCounterMode(display=False) as bwd:
        out.backward(torch.empty_like(out))
    return {"forward": int(fwd.get_total_flops()), "backward": int(bwd.get_total_flops())}
