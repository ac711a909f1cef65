"""attn_core.flops: the seed's numbers, and the formula against FlopCounterMode on a real layer."""

import pytest
import torch

from attn_core import flops, kv_cache
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


# ----------------------------------------------------------------------- real models, as built
class _PresetLayer(torch.nn.Module):
    """One layer with a preset's geometry, written from its config (not from attn_core.flops).

    Per-head K and V: Q d -> H D, K d -> H_kv D, V d -> H_kv D_v (shared by each group of heads),
    O H D_v -> d. MLA (DeepSeek-V2): Q through a q_lora_rank bottleneck; K and V from one latent
    d -> kv_lora_rank + rope_dim, up kv_lora_rank -> H (D + D_v); the RoPE key is shared by all heads.
    """

    def __init__(self, m: kv_cache.ModelConfig):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.m = m
        H, D, d = m.num_heads, m.d_head, m.d_model
        self.D_v, self.rope = m.d_v or D, m.rope_dim or 0
        if m.is_mla:
            self.q = torch.nn.Sequential(lin(d, m.q_lora_rank), lin(m.q_lora_rank, H * (D + self.rope)))
            self.kv_a = lin(d, m.kv_lora_rank + self.rope)
            self.kv_b = lin(m.kv_lora_rank, H * (D + self.D_v))
        else:
            self.q, self.k = lin(d, H * D), lin(d, m.num_kv_heads * D)
            self.v = lin(d, m.num_kv_heads * self.D_v)
        self.o = lin(H * self.D_v, d)
        n_up = 2 if m.ffn == "swiglu" else 1
        self.up = lin(d, n_up * m.ffn_dim)
        self.down = lin(m.ffn_dim, d)

    def attention_params(self) -> int:
        return sum(p.numel() for name, p in self.named_parameters() if not name.startswith(("up", "down")))

    def forward(self, x):  # x: (B, N, d)
        m, (B, N, _) = self.m, x.shape
        H, D = m.num_heads, m.d_head
        q = self.q(x).view(B, N, H, -1).transpose(1, 2)  # (B, H, N, D_qk)
        if m.is_mla:
            c, k_rope = self.kv_a(x).split([m.kv_lora_rank, self.rope], dim=-1)  # (B, N, r), (B, N, rope)
            kv = self.kv_b(c).view(B, N, H, D + self.D_v).transpose(1, 2)  # (B, H, N, D + D_v)
            k_nope, v = kv.split([D, self.D_v], dim=-1)
            k = torch.cat([k_nope, k_rope[:, None].expand(B, H, N, self.rope)], dim=-1)  # (B, H, N, D_qk)
        else:
            g = H // m.num_kv_heads
            k = self.k(x).view(B, N, m.num_kv_heads, D).transpose(1, 2)  # (B, H_kv, N, D)
            k = k.repeat_interleave(g, 1)  # (B, H, N, D)
            v = self.v(x).view(B, N, m.num_kv_heads, self.D_v).transpose(1, 2).repeat_interleave(g, 1)
        p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # (B, H, N, N)
        y = self.o((p @ v).transpose(1, 2).reshape(B, N, H * self.D_v))  # (B, N, d)
        h = self.up(y)
        if m.ffn == "swiglu":
            a, b = h.chunk(2, dim=-1)
            h = torch.nn.functional.silu(a) * b
        else:
            h = torch.nn.functional.gelu(h)
        return self.down(h)


@pytest.mark.parametrize("name", list(kv_cache.MODELS))
def test_model_layer_flops_equal_flop_counter(name):
    """model_layer_flops equals FlopCounterMode on a layer of the preset's geometry (meta device)."""
    m = kv_cache.MODELS[name]
    with torch.device("meta"):
        layer = _PresetLayer(m)
        x = torch.empty(1, 300, m.d_model)
    assert layer.attention_params() == m.attention_params()
    assert count_flops(layer, x) == sum(flops.model_layer_flops(m, 300))


@pytest.mark.parametrize("name, n_star", [
    ("Llama 3 8B", 26624), ("Llama 3 70B", 52224), ("Llama 2 7B", 24704),
    ("3.6B worked example (d=3072, H=24)", 18432)])
def test_model_crossovers(name, n_star):
    """GQA's smaller K and V projections move the crossover below 24 N d^2's 6d-based value."""
    m = kv_cache.MODELS[name]
    assert flops.model_flops_crossover(m) == n_star
    assert flops.model_flops_crossover(m, causal=True) == 2 * n_star
    lin, quad = flops.model_layer_flops(m, n_star)
    assert lin == quad


def test_deepseek_quadratic_term():
    """MLA: 2 N^2 H (D_qk + D_v) with D_qk = 128 + 64, four times the 4 N^2 d that d/H = 40 would give."""
    m = kv_cache.MODELS["DeepSeek-V2"]
    _, quad = flops.model_layer_flops(m, 1000)
    assert quad == 2 * 1000**2 * 128 * (192 + 128) == 4 * (4 * 1000**2 * m.d_model)
