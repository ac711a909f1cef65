"""attn_core.measure: saved tensors, FLOP counts and the timer, on cases known from the definitions."""

import pytest
import torch

from attn_core import measure


def test_saved_tensor_of_exp_is_its_result():
    """exp's backward is grad * exp(x): autograd saves the result, one float32 tensor."""
    x = torch.randn(3, 5, requires_grad=True)
    saved = measure.saved_tensor_bytes(torch.exp, x)
    assert [(t.shape, t.nbytes, t.saved_by) for t in saved] == [((3, 5), 60, ("ExpBackward0.result",))]
    assert not saved.tensors[0].is_leaf


def test_matmul_saves_both_operands_and_flags_leaves():
    """a @ b with both requiring grad saves a and b; both are leaves, so activations are 0."""
    a = torch.randn(4, 6, requires_grad=True)
    b = torch.randn(6, 2, requires_grad=True)
    saved = measure.saved_tensor_bytes(lambda: a @ b)
    assert sorted(t.nbytes for t in saved) == [6 * 2 * 4, 4 * 6 * 4]
    assert saved.total == (24 + 12) * 4 and saved.activations == 0
    assert all(t.is_leaf for t in saved)


def test_views_and_repeats_count_once():
    """Two views of one storage, saved by three nodes, are one storage: its full size, once."""
    x = torch.randn(8, 8, requires_grad=True)

    def fn():
        y = x * 2  # a (8, 8) activation
        top, bottom = y[:4], y[4:]  # views of y's storage
        return (top.sin() + bottom.sin()).cos()

    saved = measure.saved_tensor_bytes(fn)
    by_size = sorted(t.nbytes for t in saved)
    # y's storage (256 bytes, saved twice through two views) and the sum, saved by cos (64 bytes)
    assert by_size == [4 * 4 * 8, 8 * 8 * 4]
    y_storage = next(t for t in saved if t.nbytes == 256)
    assert sorted(y_storage.saved_by) == ["SinBackward0.self", "SinBackward0.self"]


def test_meta_device_needs_no_memory():
    """A 1 TiB-sized saved tensor on the meta device is reported, not allocated."""
    x = torch.empty(1 << 18, 1 << 18, device="meta", requires_grad=True)  # 2^36 floats = 256 GiB
    saved = measure.saved_tensor_bytes(torch.sigmoid, x)
    assert saved.total == (1 << 36) * 4


def test_table_lists_every_storage():
    x = torch.randn(2, 3, requires_grad=True)
    text = measure.saved_tensor_bytes(torch.tanh, x).table()
    assert "TanhBackward0.result" in text and text.strip().endswith("24")


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 13, 5), (64, 60, 63)], ids=str)
def test_count_flops_matmul_is_2mkn(m, k, n):
    """[M, K] @ [K, N] costs 2 M K N FLOPs by definition."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert measure.count_flops(torch.matmul, a, b) == 2 * m * k * n


def test_count_flops_batched_and_by_op():
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    assert measure.count_flops(torch.bmm, a, b) == 3 * 2 * 4 * 5 * 6
    assert measure.flops_by_op(torch.bmm, a, b) == {"bmm": 3 * 2 * 4 * 5 * 6}
    assert measure.count_flops(torch.exp, a) == 0  # element-wise work is not counted


def test_time_fn_runs_warmup_plus_repeats_and_returns_median():
    calls = []
    t = measure.time_fn(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and t >= 0


@pytest.mark.parametrize("kwargs", [dict(repeats=0), dict(repeats=1.5), dict(warmup=-1)], ids=str)
def test_time_fn_bad_input(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        measure.time_fn(lambda: None, **kwargs)


def test_time_interleaved_calls_each_function_in_turn():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    faults = {}
    t = measure.time_interleaved(fns, repeats=3, number=2, warmup=1, faults=faults)
    assert set(t) == set(faults) == {"a", "b"} and all(s >= 0 for s in t.values())
    # one warm-up call each, then round robin: a a b b, three times
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    with pytest.raises(ValueError, match="repeats"):
        measure.time_interleaved(fns, repeats=0)


def test_step_memory_tracks_a_step_on_fake_tensors():
    """A Linear layer and AdamW: the parameters are 2,080 float32 values, AdamW keeps two moments each."""
    import torch

    def build():
        lin = torch.nn.Linear(64, 32)
        return lin, torch.optim.AdamW(lin.parameters(), foreach=False)

    first = measure.step_memory(build, lambda: torch.randn(8, 64))
    later = measure.step_memory(build, lambda: torch.randn(8, 64), later=True)
    assert first["params"] == 64 * 32 + 32 == 2080
    assert set(first["running"]) == {"forward", "backward", "optimizer step"}
    assert first["peak"]["PARAM"] == 2080 * 4
    # AdamW's state: two float32 moments per parameter and one float32 step count per tensor (2 tensors);
    # during the step its temporaries come on top
    assert later["after_forward"]["OPT"] == 2 * 2080 * 4 + 2 * 4 < later["peak"]["OPT"]
    assert first["running"]["forward"] <= first["running"]["backward"] <= first["peak"]["Total"]
    assert first["phase"] in first["running"]
