"""attn_core.ledger.block_ledger == what a real pre-norm block keeps for backward, item by item.

Measured by attn_core.block.measure_block on the meta device (no memory, milliseconds), over a
grid of every option: norms, GQA, FFN kind and width, dropout and its mask, eager or fused
attention, and the three recomputation policies (torch.utils.checkpoint; selective through
torch.utils.checkpoint.create_selective_checkpoint_contexts). Korthikanti et al.'s totals too.
"""

import itertools

import pytest
import torch
import torch.utils.checkpoint

from attn_core import block, ledger
from attn_core.measure import saved_tensor_bytes

GRID = [(norm, ffn, att, rc, drop, mb, "bf16") for norm, ffn, att, rc, (drop, mb) in itertools.product(
    ("layernorm", "rmsnorm"), ("gelu", "swiglu"), ("eager", "fused"), ("none", "selective", "full"),
    ((True, None), (True, 1), (False, None)))]
# float32: RMSNorm keeps the input itself (no upcast copy), LayerNorm's statistics stay float32
GRID += [(norm, "swiglu", att, rc, True, None, "fp32") for norm, att, rc in itertools.product(
    ("layernorm", "rmsnorm"), ("eager", "fused"), ("none", "selective", "full"))]


def _id(case):
    norm, ffn, att, rc, drop, mb, dt = case
    return f"{norm}-{ffn}-{att}-{rc}-{'drop' if drop else 'nodrop'}-mask{mb}-{dt}"


@pytest.mark.parametrize("case", GRID, ids=_id)
def test_block_ledger_equals_measured(case):
    """Odd sizes: B = 2, N = 7, d = 24, H = 4, H_kv = 2, F = 40."""
    norm, ffn, att, rc, drop, mb, dt = case
    kw = dict(num_kv_heads=2, ffn=ffn, ffn_dim=40, norm=norm, attention=att, recompute=rc, dropout=drop,
              mask_bytes=mb, dtype=dt)
    measured = block.measure_block(2, 7, 24, 4, **kw)
    assert measured.pop("untagged", 0) == 0
    assert measured == ledger.block_ledger(2, 7, 24, 4, **kw)


@pytest.mark.parametrize("H_kv, ffn_dim, dtype", [(8, None, "fp16"), (1, 11008, "bf16"), (2, 96, "fp32")])
def test_block_ledger_other_shapes(H_kv, ffn_dim, dtype):
    """MHA, MQA, a Llama-wide FFN, and N = 63 (none and selective)."""
    for rc, ffn in itertools.product(("none", "selective"), ("gelu", "swiglu")):
        kw = dict(num_kv_heads=H_kv, ffn=ffn, ffn_dim=ffn_dim, recompute=rc, dtype=dtype)
        measured = block.measure_block(1, 63, 64, 8, **kw)
        assert measured.pop("untagged", 0) == 0
        assert measured == ledger.block_ledger(1, 63, 64, 8, **kw)


def test_measured_alive_equals_autograd_saved():
    """Without recomputation, what stays alive is what autograd's saved-tensor hooks see."""
    b = block.TransformerBlock(24, 4, 2, ffn="swiglu", ffn_dim=40, device="meta", dtype=torch.bfloat16)
    x = torch.empty(2, 7, 24, device="meta", dtype=torch.bfloat16, requires_grad=True)
    saved = saved_tensor_bytes(lambda: b(x * 1))
    # the input x * 1 is saved by norm1 and counted; the linear layers save their weights as
    # transposed views (not leaves), which block_ledger leaves out
    expected = ledger.block_ledger(2, 7, 24, 4, num_kv_heads=2, ffn="swiglu", ffn_dim=40)
    linear_weights = sum(m.weight.nbytes for m in b.modules() if isinstance(m, torch.nn.Linear))
    assert saved.activations == sum(expected.values()) + linear_weights


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("B, N, d, H", [(1, 4096, 3072, 24), (2, 2048, 4096, 32), (3, 63, 60, 5)])
def test_korthikanti_totals(B, N, d, H, recompute):
    """fp16, 4d GeLU MLP, LayerNorm, dropout with 1-byte masks, eager: 34 s b h + 5 a s^2 b, 34 s b h,
    2 s b h (s = N, b = B, h = d, a = H), leaving out the norms' per-token statistics as the paper does."""
    items = ledger.block_ledger(B, N, d, H, dtype="fp16", mask_bytes=1, recompute=recompute)
    stats = items.pop("norm1.stats") + items.pop("norm2.stats")
    assert sum(items.values()) == ledger.korthikanti_bytes(B, N, d, H, recompute)
    assert stats == (0 if recompute == "full" else 2 * 2 * 4 * B * N)


def test_recompute_flops():
    """FlopCounterMode: backward = 2 x forward without recomputation; full adds the whole forward
    with dropout after the FFN, and all but the FFN's last matmul (2 B N F d) without it; selective
    adds Q K^T (2 B N^2 d): the checkpoint stops recomputing once every tensor backward needs is
    back, and P V's output is not needed. Without that early stop it adds both N x N matmuls
    (4 B N^2 d)."""
    B, N, d, H = 1, 256, 64, 4
    base = block.measure_block_flops(B, N, d, H)
    assert base["backward"] == 2 * base["forward"]
    sel = block.measure_block_flops(B, N, d, H, recompute="selective")
    assert sel["forward"] == base["forward"] and sel["backward"] == base["backward"] + 2 * B * N * N * d
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        sel_all = block.measure_block_flops(B, N, d, H, recompute="selective")
    assert sel_all["backward"] == base["backward"] + 4 * B * N * N * d
    full = block.measure_block_flops(B, N, d, H, recompute="full")
    assert full["backward"] == base["backward"] + base["forward"]
    # without dropout the FFN's last matmul's output is not saved: the early stop skips it
    plain = block.measure_block_flops(B, N, d, H, dropout=False)
    full_plain = block.measure_block_flops(B, N, d, H, dropout=False, recompute="full")
    assert full_plain["backward"] == plain["backward"] + plain["forward"] - 2 * B * N * (4 * d) * d
    # the forward: 24 B N d^2 + 4 B N^2 d (the 4d MLP)
    assert base["forward"] == 24 * B * N * d * d + 4 * B * N * N * d


@pytest.mark.parametrize("kwargs, name", [
    (dict(H=5), "d_model"), (dict(num_kv_heads=3), "num_kv_heads"), (dict(ffn="relu"), "ffn"),
    (dict(norm="batchnorm"), "norm"), (dict(attention="flash"), "attention"),
    (dict(recompute="some"), "recompute"), (dict(dtype="int8"), "dtype"), (dict(N=0), "N"),
    (dict(B=-1), "B"), (dict(ffn_dim=0), "ffn_dim"), (dict(mask_bytes=0), "mask_bytes"),
])
def test_bad_input_names_the_argument(kwargs, name):
    args = dict(B=1, N=8, d_model=64, H=4)
    args.update(kwargs)
    B, N, d, H = (args.pop(k) for k in ("B", "N", "d_model", "H"))
    with pytest.raises(ValueError, match=name):
        ledger.block_ledger(B, N, d, H, **args)


def test_block_ledger_keys_and_order():
    items = ledger.block_ledger(1, 8, 64, 4)
    assert list(items) == list(ledger.BLOCK_ITEMS)
    assert all(isinstance(v, int) for v in items.values())


def test_block_saved_by_names_the_savers():
    who = block.block_saved_by(1, 16, 48, 4)
    assert who["P"] == "SoftmaxBackward0.result" and who["ffn.up"] == "GeluBackward0.self"
    assert who["X"] == "NativeLayerNormBackward0.input"
    assert block.block_saved_by(1, 16, 48, 4, recompute="full") == {"X": "checkpoint (kept to recompute)"}
    sel = block.block_saved_by(1, 16, 48, 4, recompute="selective")
    assert sel["Q"] == "checkpoint (kept to recompute)" and "P" not in sel
    with pytest.raises(ValueError, match="unknown option"):
        block.block_saved_by(1, 16, 48, 4, causal=True)
