"""attn_core.training (weights, gradients, optimizer state, ZeRO) and ModelConfig.num_params().

num_params is checked against Hugging Face ``transformers`` models built on the meta device from
configs written here (no download); ``transformers`` is a test dependency, skipped when missing.
"""

from fractions import Fraction

import pytest
import torch

from attn_core import kv_cache, training

GB = 10**9


def test_zero_paper_figure_1():
    """Rajbhandari et al. (2020), Figure 1: 7.5B parameters, 64 ranks, mixed precision AdamW (K = 12)."""
    per_rank = [sum(training.training_state_bytes(7_500_000_000, zero_stage=s, dp_ranks=64).values())
                for s in range(4)]
    assert per_rank == [120 * GB, Fraction(314_0625, 10**5) * GB, Fraction(16_640625, 10**6) * GB,
                        Fraction(1875, 1000) * GB]
    assert [round(x / GB, 1) for x in per_rank] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("precision, optimizer, expected", [
    ("bf16_mixed", "adamw", (2, 2, 12)), ("fp32", "adamw", (4, 4, 8)),
    ("fp32", "sgd_momentum", (4, 4, 4)), ("bf16_mixed", "sgd_momentum", (2, 2, 8)),
    ("fp32", "sgd", (4, 4, 0)), ("bf16_mixed", "sgd", (2, 2, 4)),
])
def test_bytes_per_param(precision, optimizer, expected):
    per = training.bytes_per_param(precision, optimizer)
    assert (per["weights"], per["gradients"], per["optimizer"]) == expected


def test_optimizer_state_measured():
    """torch.optim keeps what the table says: AdamW two fp32 buffers per parameter, SGD momentum one."""
    w = torch.nn.Parameter(torch.zeros(5, 7))
    for opt, n in ((torch.optim.AdamW([w]), 2), (torch.optim.SGD([w], lr=0.1, momentum=0.9), 1)):
        w.grad = torch.ones_like(w)
        opt.step()
        bufs = [t for t in opt.state[w].values() if isinstance(t, torch.Tensor) and t.numel() == w.numel()]
        assert len(bufs) == n and all(t.dtype == torch.float32 for t in bufs)
        assert n == training.OPTIMIZERS["adamw" if isinstance(opt, torch.optim.AdamW) else "sgd_momentum"]


@pytest.mark.parametrize("kwargs, name", [
    (dict(zero_stage=4), "zero_stage"), (dict(zero_stage=True), "zero_stage"), (dict(dp_ranks=0), "dp_ranks"),
    (dict(precision="fp8"), "precision"), (dict(optimizer="lion"), "optimizer"),
])
def test_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        training.training_state_bytes(1000, **kwargs)
    with pytest.raises(ValueError, match="num_params"):
        training.training_state_bytes(0)


PUBLISHED = {"Llama 2 7B": 6_738_415_616, "Llama 3 8B": 8_030_261_248, "Llama 3 70B": 70_553_706_496,
             "Mistral 7B": 7_241_732_096}


@pytest.mark.parametrize("name, count", PUBLISHED.items())
def test_num_params_published(name, count):
    assert kv_cache.MODELS[name].num_params() == count


def _hf_model(m: kv_cache.ModelConfig):
    """The preset built with Hugging Face transformers on the meta device, from its config values."""
    T = pytest.importorskip("transformers", reason="transformers is a test dependency (not installed)")
    if m.name.startswith("GPT-2"):
        cfg = T.GPT2Config(n_layer=m.num_layers, n_embd=m.d_model, n_head=m.num_heads, n_inner=m.ffn_dim,
                           vocab_size=m.vocab_size, n_positions=m.positions, tie_word_embeddings=True)
        cls = T.GPT2LMHeadModel
    elif m.is_mla:
        cfg = T.DeepseekV2Config(
            num_hidden_layers=m.num_layers, hidden_size=m.d_model, num_attention_heads=m.num_heads,
            num_key_value_heads=m.num_kv_heads, intermediate_size=m.ffn_dim, vocab_size=m.vocab_size,
            kv_lora_rank=m.kv_lora_rank, q_lora_rank=m.q_lora_rank, qk_rope_head_dim=m.rope_dim,
            qk_nope_head_dim=m.d_head, v_head_dim=m.d_v, n_routed_experts=m.num_experts,
            n_shared_experts=m.shared_experts, moe_intermediate_size=m.expert_dim,
            first_k_dense_replace=m.dense_layers, num_experts_per_tok=6, tie_word_embeddings=False)
        cls = T.DeepseekV2ForCausalLM
    elif m.norm == "layernorm":
        return None  # the worked example has no published architecture
    else:
        Cfg = T.MistralConfig if m.window else T.LlamaConfig
        cfg = Cfg(num_hidden_layers=m.num_layers, hidden_size=m.d_model, num_attention_heads=m.num_heads,
                  num_key_value_heads=m.num_kv_heads, head_dim=m.d_head, intermediate_size=m.ffn_dim,
                  vocab_size=m.vocab_size, tie_word_embeddings=m.tie_embeddings)
        cls = T.MistralForCausalLM if m.window else T.LlamaForCausalLM
    with torch.device("meta"):
        return cls(cfg)


@pytest.mark.parametrize("name", list(kv_cache.MODELS))
def test_num_params_equals_transformers(name):
    m = kv_cache.MODELS[name]
    model = _hf_model(m)
    if model is None:
        assert m.num_params() == m.num_layers * (m.attention_params() + m.ffn_params() + 4 * m.d_model) \
            + 2 * m.d_model
        return
    assert m.num_params() == sum(p.numel() for p in model.parameters())
    cfg = model.config
    if m.is_mla:
        assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.v_head_dim) == (m.kv_lora_rank, m.rope_dim, m.d_v)
    elif not name.startswith("GPT-2"):
        attn = model.model.layers[0].self_attn
        assert attn.k_proj.out_features == m.num_kv_heads * m.d_head
        assert attn.head_dim == m.d_head
