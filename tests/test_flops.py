"""attn_core.flops: the seed's numbers, and the formula against FlopCounterMode on a real layer."""

import pytest
import torch

from attn_core import flops
from attn_core.attention import TransformerLayer, mha_forward
from attn_core.measure import count_flops

D = 3072  # the seed's model width


def test_seed_numbers_at_4096():
    """Seed 003, 4.5: N=4096, d=3072 gives 927.71 GFLOPs linear, 206.16 quadratic, 18.2% / 40.0% shares."""
    lin, quad = flops.layer_flops(4096, D)
    assert lin == 24 * 4096 * D * D and quad == 4 * 4096**2 * D
    assert f"{lin / 1e9:.2f}" == "927.71" and f"{quad / 1e9:.2f}" == "206.16"
    assert round(100 * quad / (lin + quad), 1) == 18.2
    lin_a, quad_a = flops.layer_flops(4096, D, with_ffn=False)
    assert round(100 * quad_a / (lin_a + quad_a), 1) == 40.0


@pytest.mark.parametrize("N, share", [(16384, 47.1), (32768, 64.0), (65536, 78.0)], ids=str)
def test_seed_share_table(N, share):
    lin, quad = flops.layer_flops(N, D)
    assert round(100 * quad / (lin + quad), 1) == share


def test_crossovers():
    """N* = 6d = 18432 with the FFN, 2d = 6144 without (seed 003, 3.3); terms equal there."""
    assert flops.flops_crossover(D) == 18432
    assert flops.flops_crossover(D, with_ffn=False) == 6144
    for with_ffn in (True, False):
        n_star = int(flops.flops_crossover(D, with_ffn))
        lin, quad = flops.layer_flops(n_star, D, with_ffn)
        assert lin == quad


def test_switches_move_the_crossover():
    """A 4d SwiGLU (three matrices) makes linear 32 N d^2: N* = 8d; causal halves quadratic: N* doubles."""
    assert flops.flops_crossover(D, ffn="swiglu") == 8 * D
    assert flops.flops_crossover(D, causal=True) == 12 * D
    # a parameter-matched SwiGLU (hidden 8d/3) costs the same as the 4d MLP
    assert flops.flops_crossover(96, ffn="swiglu", ffn_mult=8 / 3) == 6 * 96
    assert flops.layer_flops(100, 64, causal=True)[1] == 2 * 100 * 100 * 64


@pytest.mark.parametrize("N", [1, 7, 100, 512, 4096], ids=lambda n: f"N={n}")
@pytest.mark.parametrize("ffn, mult", [("mlp", 4), ("swiglu", 8 / 3), ("swiglu", 4)], ids=str)
def test_formula_equals_flop_counter(N, ffn, mult):
    """layer_flops equals FlopCounterMode's count of a real eager layer (meta device, so any N is cheap)."""
    d, H = 96, 4
    with torch.device("meta"):
        layer = TransformerLayer(d, H, ffn=ffn, ffn_mult=mult)
        x = torch.empty(1, N, d)
    measured = count_flops(layer, x)
    assert measured == sum(flops.layer_flops(N, d, ffn=ffn, ffn_mult=mult))


@pytest.mark.parametrize("N", [33, 256, 32768], ids=lambda n: f"N={n}")
def test_attention_block_equals_flop_counter(N):
    """Without the FFN: 8 N d^2 + 4 N^2 d, counted on mha_forward at the seed's width."""
    with torch.device("meta"):
        x = torch.empty(1, N, D, dtype=torch.bfloat16)
        w = [torch.empty(D, D, dtype=torch.bfloat16) for _ in range(4)]
    assert count_flops(mha_forward, x, *w, 24) == sum(flops.layer_flops(N, D, with_ffn=False))


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(N=0, d=64), "N"), (dict(N=8, d=-1), "d"), (dict(N=8, d=64, ffn="moe"), "ffn"),
     (dict(N=8, d=64, ffn_mult=0), "ffn_mult"), (dict(N=2.5, d=64), "N")],
    ids=["N=0", "d<0", "unknown ffn", "ffn_mult=0", "N float"],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        flops.layer_flops(**kwargs)
    with pytest.raises(ValueError):
        flops.flops_crossover(0)
