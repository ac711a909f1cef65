"""attn_core.ledger: the seed's published numbers, and the ledger against what autograd saves.

The measured side runs a real eager attention layer (attn_core.attention.mha_forward)
on the meta device and reads the tensors autograd keeps for backward. Every item of
the teaching ledger is matched to a measured storage, and every difference between
the two is asserted and explained where it happens.
"""

import math

import pytest
import torch

from attn_core import ledger
from attn_core.attention import mha_forward
from attn_core.measure import saved_tensor_bytes

GIB, MIB = 1024**3, 1024**2
D_MODEL, HEADS = 3072, 24  # the seed's worked example


# ----------------------------------------------------------------------------- formula
def test_seed_total_at_4096():
    """Seed 003, section 4.4: B=1, N=4096, d=3072, H=24, bf16 totals 2,566,914,048 bytes."""
    items = ledger.activation_ledger(1, 4096, D_MODEL, HEADS, "bf16")
    assert sum(items.values()) == 2_566_914_048
    for name in ("S", "P", "dropout"):
        assert items[name] == 805_306_368
    for name in ("X", "Q", "K", "V", "ctx", "O"):
        assert items[name] == 25_165_824
    quad = items["S"] + items["P"] + items["dropout"]
    assert round(100 * items["S"] / sum(items.values()), 1) == 31.4
    assert round(100 * quad / sum(items.values()), 1) == 94.1


@pytest.mark.parametrize(
    "N, total_text, ratio",
    [(1024, "180.00 MiB", 5.0), (2048, "648.00 MiB", 9.0), (4096, "2.39 GiB", 17.0),
     (8192, "9.28 GiB", 33.0), (16384, "36.56 GiB", 65.0), (32768, "145.12 GiB", 129.0)],
    ids=lambda v: str(v),
)
def test_seed_growth_table(N, total_text, ratio):
    """Seed 003's growth table: totals and the eager/fused ratio, as the seed prints them."""
    total = sum(ledger.activation_ledger(1, N, D_MODEL, HEADS).values())
    value, unit = total_text.split()
    shown = total / (GIB if unit == "GiB" else MIB)
    assert f"{shown:.2f}" == value
    fused = ledger.fused_activation_bytes(1, N, D_MODEL)
    assert round(total / fused, 1) == ratio


def test_memory_crossover_is_where_terms_meet():
    """N* = 2d/H = 256 for the seed's model, and the two terms are equal there."""
    n_star = ledger.memory_crossover(D_MODEL, HEADS)
    assert n_star == 256
    items = ledger.activation_ledger(1, 256, D_MODEL, HEADS)
    linear = sum(v for k, v in items.items() if k not in ("S", "P", "dropout"))
    assert linear == items["S"] + items["P"] + items["dropout"]


def test_dropout_off_and_dtypes():
    """dropout=False zeroes that item; fp32 doubles every bf16 item; fp8 halves it."""
    bf16 = ledger.activation_ledger(2, 100, 64, 4, "bf16")
    assert ledger.activation_ledger(2, 100, 64, 4, "bf16", dropout=False)["dropout"] == 0
    fp32 = ledger.activation_ledger(2, 100, 64, 4, "fp32")
    fp8 = ledger.activation_ledger(2, 100, 64, 4, "fp8")
    assert all(fp32[k] == 2 * bf16[k] == 4 * fp8[k] for k in bf16)
    assert bf16["S"] == 2 * 4 * 100 * 100 * 2 and bf16["X"] == 2 * 100 * 64 * 2


@pytest.mark.parametrize(
    "args, match",
    [((1, 4096, 3072, 24, "int3"), "dtype"), ((1, 4096, 3000, 7), "d_model"),
     ((1, 0, 64, 4), "N"), ((0, 16, 64, 4), "B"), ((1, 16, 64, -4), "H"), ((1, 16.5, 64, 4), "N")],
    ids=["unknown dtype", "d not divisible by H", "N=0", "B=0", "H<0", "N float"],
)
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        ledger.activation_ledger(*args)


def test_bad_crossover_input():
    with pytest.raises(ValueError, match="d_model"):
        ledger.memory_crossover(0, 24)


# ----------------------------------------------------------------------------- measured
def _measure_eager_layer(N: int, d: int = D_MODEL, H: int = HEADS, dropout_p: float = 0.1):
    with torch.device("meta"):
        x = torch.empty(1, N, d, dtype=torch.bfloat16)
        weights = [torch.empty(d, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(4)]
    return saved_tensor_bytes(mha_forward, x, *weights, H, dropout_p=dropout_p)


def _one(saved, label: str, shape_tail=None):
    """The single storage saved under ``label`` (and with the given trailing shape)."""
    hits = [t for t in saved if any(s.startswith(label) for s in t.saved_by)
            and (shape_tail is None or tuple(t.shape[-len(shape_tail):]) == tuple(shape_tail))]
    assert len(hits) == 1, f"expected one storage saved by {label} {shape_tail}, got {hits}"
    return hits[0]


@pytest.mark.parametrize("N", [4096, 32768])
def test_ledger_against_saved_tensors(N):
    """Item by item: the teaching ledger against what autograd saves for an eager layer (bf16, dropout)."""
    d, H = D_MODEL, HEADS
    book = ledger.activation_ledger(1, N, d, H, "bf16", dropout=True)
    saved = _measure_eager_layer(N)
    square = [t for t in saved if tuple(t.shape[-2:]) == (N, N)]
    linear = [t for t in saved if not t.is_leaf and t not in square]

    # P: softmax's backward needs its output, so the weights P are saved, at the ledger's size.
    assert _one(saved, "SoftmaxBackward0.result").nbytes == book["P"]
    # dropout: off CUDA, dropout multiplies by a float tensor of P's dtype (mask / (1 - p)),
    # saved by the multiply; 2 bytes a value in bf16, as the ledger assumes. (A fused CUDA
    # kernel keeps a 1-byte bool mask instead.)
    mult = _one(saved, "MulBackward0.other")
    assert mult.dtype == torch.bfloat16 and mult.nbytes == book["dropout"]
    # S is NOT saved: nothing's backward needs the raw scores (division by sqrt(D) saves a
    # scalar, softmax saves its output). Its place among the N x N tensors is taken by the
    # dropped-out weights, which the P @ V matmul saves as its left operand.
    dropped = _one(saved, "BmmBackward0.self", (N, N))
    assert dropped.nbytes == book["S"]
    assert len(square) == 3 and sum(t.nbytes for t in square) == book["S"] + book["P"] + book["dropout"]

    # X and ctx are both (N, d) left operands of projection matmuls. X is saved once
    # (one storage) although the three projections Q, K, V each save it.
    proj_inputs = [t for t in linear if any(s.startswith("MmBackward0.self") for s in t.saved_by)]
    assert sorted(len(t.saved_by) for t in proj_inputs) == [1, 3]
    x = next(t for t in proj_inputs if len(t.saved_by) == 3)
    assert x.nbytes == book["X"] and x.shape[-2:] == (N, d)
    # Q and K: saved by the Q K^T matmul, as views of the projection outputs.
    assert _one(saved, "BmmBackward0.self", (N, d // H)).nbytes == book["Q"]
    assert _one(saved, "BmmBackward0.mat2", (d // H, N)).nbytes == book["K"]
    # V: saved by the P @ V matmul.
    assert _one(saved, "BmmBackward0.mat2", (N, d // H)).nbytes == book["V"]
    # ctx: the merged heads, saved by the output projection.
    ctx = next(t for t in proj_inputs if len(t.saved_by) == 1)
    assert ctx.nbytes == book["ctx"] and ctx.shape[-2:] == (N, d)
    # O: the layer's output is not saved by this layer (the next layer saves it as its X),
    # so the measured activations are the ledger total less one (B, N, d) tensor.
    assert len(linear) == 5
    assert saved.activations == sum(book.values()) - book["O"]
    # Weights are outside the ledger; only W_o is saved, because X does not require grad here
    # (W_q, W_k, W_v would be needed only for X's gradient).
    leaves = [t for t in saved if t.is_leaf]
    assert len(leaves) == 1 and leaves[0].nbytes == d * d * 2


def test_no_dropout_saves_two_square_tensors():
    """Without dropout the N x N storages are P only: the matmul saves P itself, already kept."""
    N = 2048
    saved = _measure_eager_layer(N, dropout_p=0.0)
    square = [t for t in saved if tuple(t.shape[-2:]) == (N, N)]
    book = ledger.activation_ledger(1, N, D_MODEL, HEADS, dropout=False)
    assert len(square) == 1 and square[0].nbytes == book["P"]
    assert set(square[0].saved_by) == {"SoftmaxBackward0.result", "BmmBackward0.self"}


def test_measured_on_cpu_equals_meta():
    """The meta-device measurement lists the same storages as a real CPU run (small sizes)."""
    N, d, H = 48, 32, 4
    results = []
    for device in ("cpu", "meta"):
        torch.manual_seed(0)
        with torch.device(device):
            x = torch.randn(2, N, d)
            weights = [torch.randn(d, d, requires_grad=True) for _ in range(4)]
        # dropout 0 on CPU so the two runs take identical paths
        saved = saved_tensor_bytes(mha_forward, x, *weights, H, dropout_p=0.0)
        results.append(sorted((t.shape, t.nbytes, t.saved_by) for t in saved))
    assert results[0] == results[1]
    assert math.prod(results[0][0][0]) > 0


# ----------------------------------------------------------------------- as autograd saves it
@pytest.mark.parametrize("dropout", [True, False], ids=["dropout", "no dropout"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N", [63, 4096])
def test_autograd_ledger_equals_saved_tensors(N, causal, dropout):
    """saved="autograd" equals the measured activations exactly, item for item in total (bf16, CPU mask)."""
    d, H = D_MODEL, HEADS
    with torch.device("meta"):
        x = torch.empty(2, N, d, dtype=torch.bfloat16)
        weights = [torch.empty(d, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(4)]
    saved = saved_tensor_bytes(mha_forward, x, *weights, H, dropout_p=0.1 if dropout else 0.0, causal=causal)
    book = ledger.activation_ledger(2, N, d, H, "bf16", dropout=dropout, saved="autograd", causal=causal)
    assert saved.activations == sum(book.values())
    assert book["O"] == 0 and "S" not in book
    square = [t for t in saved if tuple(t.shape[-2:]) == (N, N) and not t.is_leaf]
    assert sum(t.nbytes for t in square) == book["P"] + book["dropout"] + book["P_drop"] + book["mask"]
    if causal:  # the dense mask masked_fill keeps: one (N, N) bool, shared by every batch and head
        mask = _one(saved, "MaskedFillBackward0.mask")
        assert mask.dtype == torch.bool and mask.nbytes == book["mask"] == N * N


@pytest.mark.parametrize("dropout, mask_bytes, expected", [
    (False, None, 5 * 3072 / 24), (True, None, 5 * 3072 / (3 * 24)), (True, 1, 5 * 2 * 3072 / (5 * 24))],
    ids=["no dropout", "dropout, CPU mask", "dropout, bool mask"])
def test_autograd_crossover(dropout, mask_bytes, expected):
    """N* as autograd saves it: 5d/H = 640 without dropout; the two parts are equal there."""
    n_star = ledger.memory_crossover(D_MODEL, HEADS, saved="autograd", dropout=dropout, mask_bytes=mask_bytes)
    assert n_star == pytest.approx(expected, rel=1e-15)
    items = ledger.activation_ledger(1, 1, D_MODEL, HEADS, dropout=dropout, saved="autograd",
                                     mask_bytes=mask_bytes)
    linear = sum(items[k] for k in ("X", "Q", "K", "V", "ctx"))
    quadratic = items["P"] + items["dropout"] + items["P_drop"]
    assert linear * n_star == pytest.approx(quadratic * n_star**2, rel=1e-12)
    assert ledger.memory_crossover(D_MODEL, HEADS, dropout=False) == 3 * D_MODEL / HEADS  # teaching, S and P


def test_head_dims_and_bad_options():
    """GQA shrinks K and V to H_kv heads; unknown ledgers and bad head counts are rejected by name."""
    gqa = ledger.activation_ledger(1, 10, 4096, 32, num_kv_heads=8)
    assert gqa["K"] == gqa["V"] == gqa["Q"] // 4
    mla = ledger.activation_ledger(1, 10, 5120, 128, d_head=192, d_v=128)
    assert mla["Q"] == 10 * 128 * 192 * 2 and mla["V"] == 10 * 128 * 128 * 2
    with pytest.raises(ValueError, match="saved"):
        ledger.activation_ledger(1, 10, 64, 4, saved="measured")
    with pytest.raises(ValueError, match="num_kv_heads"):
        ledger.activation_ledger(1, 10, 64, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="mask_bytes"):
        ledger.activation_ledger(1, 10, 64, 4, saved="autograd", mask_bytes=0)


@pytest.mark.parametrize("saved", ["teaching", "autograd"])
def test_crossover_with_head_dims(saved):
    """Given head dims, N* is where the ledger's two parts meet; for MHA it is the closed form."""
    mha = ledger.memory_crossover(3072, 24, saved=saved, num_kv_heads=24, d_head=128, d_v=128)
    assert mha == pytest.approx(ledger.memory_crossover(3072, 24, saved=saved), rel=1e-15)
    for kw in (dict(num_kv_heads=8, d_head=128), dict(d_head=192, d_v=128)):  # GQA; MLA-like dims
        n_star = ledger.memory_crossover(4096, 32, saved=saved, **kw)
        lo = ledger.activation_ledger(1, math.floor(n_star), 4096, 32, saved=saved, **kw)
        hi = ledger.activation_ledger(1, math.ceil(n_star) + 1, 4096, 32, saved=saved, **kw)
        quad = lambda it: sum(it.get(k, 0) for k in ("S", "P", "dropout", "P_drop"))  # noqa: E731
        assert quad(lo) <= sum(lo.values()) - quad(lo) and quad(hi) > sum(hi.values()) - quad(hi)
