"""attn_core.parallel run for real: process groups of 2 and 4 ranks (gloo, 127.0.0.1), started here.

One 4-rank launch runs every experiment (the 2-rank ones in a subgroup of ranks 0 and 1), so the
processes start once; each test then checks one experiment's results in float64 against the
single-process reference. launch() bounds every run in time and kills what is left, and a
failing rank is reported, not waited on (test_a_failing_rank_does_not_hang).
"""

import multiprocessing
import time

import parallel_workers  # tests/parallel_workers.py: the failing, hanging and bad-input workers
import pytest
import torch

from attn_core import formulas
from attn_core import parallel as par
from attn_core.attention import causal_mask, scaled_dot_product_attention
from attn_core.measure import saved_tensor_bytes

TOL = dict(rtol=1e-10, atol=1e-10)  # float64 throughout: the ring only reorders sums

RING = {  # name: (ranks, spec); N = 13 and 7 are not divisible by the ranks
    "contiguous causal N=13 P=4": (4, dict(B=2, H=2, N=13, D=5, causal=True)),
    "contiguous full N=13 P=4": (4, dict(B=1, H=3, N=13, D=4, D_v=3, causal=False)),
    "zigzag causal N=16 P=4": (4, dict(B=2, H=2, N=16, D=5, causal=True, layout="zigzag")),
    "zigzag full N=24 P=4": (4, dict(B=1, H=2, N=24, D=3, causal=False, layout="zigzag")),
    "contiguous causal N=7 P=2": (2, dict(B=1, H=2, N=7, D=6, causal=True)),
    "contiguous causal N=12 P=2": (2, dict(B=1, H=2, N=12, D=6, causal=True)),
    "zigzag causal N=12 P=2": (2, dict(B=1, H=2, N=12, D=6, D_v=4, causal=True, layout="zigzag")),
}
TP = {  # name: (ranks, spec)
    "TP P=4": (4, dict(B=2, N=8, d=16, H=4, F=24, sequence_parallel=False)),
    "TP+SP P=4": (4, dict(B=2, N=8, d=16, H=4, F=24, sequence_parallel=True)),
    "TP P=2": (2, dict(B=1, N=6, d=12, H=2, F=20, sequence_parallel=False)),
    "TP+SP P=2": (2, dict(B=1, N=6, d=12, H=2, F=20, sequence_parallel=True)),
}
JOBS = ([(name, "ring", spec, ranks) for name, (ranks, spec) in RING.items()]
        + [(name, "tp", spec, ranks) for name, (ranks, spec) in TP.items()]
        + [("errors P=4", parallel_workers.worker_errors, None, 4),
           ("errors P=2", parallel_workers.worker_errors, None, 2)])


@pytest.fixture(scope="module")
def results():
    """Every experiment's per-rank results (rank order), from one 4-rank run."""
    per_rank = par.launch(par.worker_suite, 4, JOBS, timeout=150)
    return {name: [r[name] for r in per_rank if r[name] is not None] for name, *_ in JOBS}


def _reference(spec):
    """Single-process attention, its gradients, in float64."""
    q, k, v, dout = par.ring_inputs(spec)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    mask = causal_mask(spec["N"]) if spec.get("causal", True) else None
    out = scaled_dot_product_attention(q, k, v, mask)
    (out * dout).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("name", RING)
def test_ring_attention_equals_full_attention(results, name):
    """Output shards and the gradients of q, k, v reassemble into full attention's."""
    ranks, spec = RING[name]
    layout = spec.get("layout", "contiguous")
    runs = results[name]
    assert len(runs) == ranks
    for key, ref in zip(("out", "dq", "dk", "dv"), _reference(spec)):
        got = par.unshard_sequence([r[key] for r in runs], layout)
        torch.testing.assert_close(got, ref, **TOL, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("name", RING)
def test_ring_saved_and_sent_equal_the_ledger(results, name):
    """Each rank saves q, k, v, out and a logsumexp of its shard.

    It sends c - 1 K, V blocks forward, and c - 1 K, V blocks and c - 1 dK, dV blocks backward.
    """
    ranks, spec = RING[name]
    runs = results[name]
    d_v = spec.get("D_v", spec["D"])
    lens = [r["out"].shape[-2] for r in runs]
    for r, n in zip(runs, lens):  # the formula at this rank's own shard length n = N / c
        items = par.cp_ledger(spec["B"], n * ranks, spec["H"], spec["D"], ranks, D_v=d_v, bytes_per_value=8)
        assert r["saved"] == sum(items.values())
    if len(set(lens)) == 1:  # equal shards: every rank sends exactly the formula
        expected = par.comm_bytes("CP", B=spec["B"], N=spec["N"], degree=ranks, H=spec["H"], D=spec["D"],
                                  D_v=d_v, bytes_per_value=8)
        for r in runs:
            assert {**r["sent_fwd"], **r["sent_bwd"]} == expected
    else:  # uneven shards: rank r forwards every K, V shard but the next rank's
        block = [spec["B"] * spec["H"] * n * (spec["D"] + d_v) * 8 for n in lens]
        for rank, r in enumerate(runs):
            assert r["sent_fwd"]["ring K, V (forward)"] == sum(block) - block[(rank + 1) % ranks]


def test_zigzag_balances_the_causal_work(results):
    """Contiguous shards: rank r evaluates r + 1 blocks of scores; zigzag: every rank the same.

    Zigzag, c ranks and chunks of m = N/(2c) tokens: 2 diagonal and 2c - 1 full m x m blocks each.
    """
    for c, suffix in ((2, "N=12 P=2"), (4, "N=16 P=4")):
        n = int(suffix.split()[0][2:]) // c
        if c == 2:
            contiguous = [r["stats"]["scores"] for r in results[f"contiguous causal {suffix}"]]
            assert contiguous == [(rank + 1) * n * n for rank in range(c)]
        zigzag = [r["stats"]["scores"] for r in results[f"zigzag causal {suffix}"]]
        assert zigzag == [(2 + 2 * c - 1) * (n // 2) ** 2] * c


@pytest.mark.parametrize("name", TP)
def test_tensor_parallel_block_equals_the_reference(results, name):
    """Output, input gradient and every parameter's gradient (this rank's slice) equal one process's."""
    for r in results[name]:
        torch.testing.assert_close(r["out"], r["ref_out"], **TOL)
        torch.testing.assert_close(r["dx"], r["ref_dx"], **TOL)
        assert r["grads"].keys() == r["ref_grads"].keys()
        for key in r["grads"]:
            torch.testing.assert_close(r["grads"][key], r["ref_grads"][key], **TOL,
                                       msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("name", TP)
def test_tensor_parallel_saved_and_sent_equal_the_ledger(results, name):
    """Per rank: saved activations = tp_ledger, weights = tp_weight_exprs, bytes sent = comm_bytes."""
    ranks, spec = TP[name]
    sp = spec["sequence_parallel"]
    items = par.tp_ledger(spec["B"], spec["N"], spec["d"], spec["H"], ranks, ffn_dim=spec["F"],
                          sequence_parallel=sp, bytes_per_value=8)
    weights = par.evaluate(par.tp_weight_exprs(), dict(d=spec["d"], F=spec["F"], b=8, t=ranks))
    sent = par.comm_bytes("TP+SP" if sp else "TP", B=spec["B"], N=spec["N"], degree=ranks,
                          d_model=spec["d"], bytes_per_value=8)
    # the "does it fit" widget's parameters per rank (formulas.per_rank_params): the block's
    # 4 d^2 + 2 d F matrix entries split, its two LayerNorms (4 d) whole
    d, F = spec["d"], spec["F"]
    per_rank = formulas.per_rank_params(P_w=4 * d * d + 2 * d * F + 4 * d, P_rep=4 * d, t=ranks)
    for r in results[name]:
        assert r["saved_activations"] == sum(items.values())
        assert r["weights"] == sum(weights.values()) == 8 * per_rank
        assert {**r["sent_fwd"], **r["sent_bwd"]} == sent


def test_tensor_parallel_ledger_at_one_rank_is_the_reference_block():
    """t = 1 (no parallelism): the ledger equals what autograd saves for the single-process block."""
    B, N, d, H, F = 2, 7, 12, 3, 20
    ref = par.ReferenceBlock(d, H, F, dtype=torch.float64)
    x = torch.randn(B, N, d, dtype=torch.float64, requires_grad=True)
    saved = saved_tensor_bytes(lambda x: ref(x.clone()), x)
    for sp in (False, True):
        assert saved.activations == sum(par.tp_ledger(B, N, d, H, 1, ffn_dim=F, sequence_parallel=sp,
                                                      bytes_per_value=8).values())


@pytest.mark.parametrize("name", ["errors P=4", "errors P=2"])
def test_bad_input_raises_the_same_value_error_on_every_rank(results, name):
    """Every case raises ValueError on every rank, naming the argument; then the group still works."""
    runs = results[name]
    words = {"zigzag, N not divisible by 2 size": "q: the zigzag layout needs N divisible",
             "mismatched shards (head dim)": "q, k, v: mismatched shards",
             "mismatched shards (batch)": "q, k, v: mismatched shards",
             "layout differs across ranks": "layout must be the same on every rank",
             "q not a tensor on the last rank": "q must be a torch.Tensor",
             "t does not divide H": "num_heads",
             "SP, N not divisible by t": "x: mismatched shards: sequence parallelism needs N divisible by t"}
    for case, word in words.items():
        messages = [r[case] for r in runs]
        assert all(m is not None and word in m for m in messages), (case, messages)
        assert len(set(messages)) == 1, (case, messages)  # the same error everywhere
    assert all(r["then a correct call"][-2] > 0 for r in runs)


def test_no_process_group_is_a_value_error():
    """Outside a process group every entry point says so, naming the group."""
    assert not torch.distributed.is_initialized()
    x = torch.zeros(1, 4, 2)
    with pytest.raises(ValueError, match="group: no initialized"):
        par.ring_attention(x, x, x)
    with pytest.raises(ValueError, match="group: no initialized"):
        par.TensorParallelBlock(par.ReferenceBlock(8, 2))
    with pytest.raises(ValueError, match="group: no initialized"):
        par.all_reduce(x)


def test_a_failing_rank_does_not_hang():
    """Rank 1 raises while rank 0 waits for it in the ring: launch() reports rank 1, nothing is left."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 failed:(.|\n)*on purpose"):
        par.launch(parallel_workers.worker_fail, 2, timeout=60)
    assert time.monotonic() - t0 < 60
    assert multiprocessing.active_children() == []


def test_ledger_formulas():
    """The SymPy ledgers: Korthikanti et al.'s totals, and the ring's three equal passes."""
    import sympy as sp

    s, b, h, a, t = sp.symbols("s b h a t", positive=True, integer=True)
    total = {key: par.to_paper_letters(sum(par.korthikanti_exprs(*flags).values()))
             for key, flags in {"none": (False, False), "TP": (True, False), "TP+SP": (True, True)}.items()}
    assert sp.simplify(total["none"] - s * b * h * (34 + 5 * a * s / h)) == 0
    assert sp.simplify(total["TP"] - s * b * h * (10 + 24 / t + 5 * a * s / (h * t))) == 0
    assert sp.simplify(total["TP+SP"] - (34 * s * b * h / t + 5 * a * s**2 * b / t)) == 0
    cp = par.comm_bytes("CP", B=1, N=64, degree=4, H=2, D=8)
    assert len(set(cp.values())) == 1 and cp["ring K, V (forward)"] == 3 * 2 * 16 * 16 * 2
    with pytest.raises(ValueError, match="t"):
        par.tp_ledger(1, 8, 16, 3, 2)  # H = 3 heads do not split over t = 2
    with pytest.raises(ValueError, match="scheme"):
        par.comm_exprs("PP")


@pytest.mark.parametrize("layout,N", [("contiguous", 13), ("zigzag", 16)])
def test_shard_and_unshard_are_inverse(layout, N):
    x = torch.arange(N).reshape(1, N, 1)
    shards = par.shard_sequence(x, 4, layout, dim=-2)
    assert torch.equal(par.unshard_sequence(shards, layout, dim=-2), x)
    if layout == "zigzag":  # rank 0 holds the first and the last chunk
        assert shards[0].flatten().tolist() == [0, 1, 14, 15]
    with pytest.raises(ValueError, match="layout"):
        par.chunk_ids(0, 4, "striped")


def test_a_hanging_rank_is_killed_at_the_time_limit():
    """A run that outlives its time limit is killed and reported, not waited on."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish within 6"):
        par.launch(parallel_workers.worker_hang, 1, timeout=6)
    assert time.monotonic() - t0 < 20
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("t", [1, 2, 4])
@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["TP", "TP+SP"])
def test_per_rank_share_of_the_block_ledger_is_korthikanti(t, sequence_parallel):
    """per_rank_activations on the block ledger with Korthikanti et al.'s options (GeLU, LayerNorm,
    dropout with 1-byte masks, eager, bf16) is their per-rank count plus the norms' statistics."""
    from attn_core import ledger

    B, N, d, H = 2, 64, 32, 4
    items = ledger.block_ledger(B, N, d, H, ffn="gelu", norm="layernorm", dropout=True, attention="eager",
                                mask_bytes=1, dtype="bf16")
    share = par.per_rank_activations(items, t=t, sequence_parallel=sequence_parallel)
    stats = sum(v for k, v in share.items() if k.endswith(".stats"))
    theirs = par.evaluate({"k": sum(par.korthikanti_exprs(True, sequence_parallel).values())},
                          dict(B=B, N=N, d=d, H=H, b=2, t=t))["k"]
    assert sum(share.values()) - stats == theirs


def test_per_rank_share_under_context_parallelism_is_the_ring_ledger():
    """c-way CP of a fused block: the attention items a rank keeps (Q, K, V, the output ctx, the
    float32 logsumexp) are cp_ledger's q, k, v, out, logsumexp, which real ring ranks save (the test
    above); eager attention keeps K and V of all N tokens, every other item 1/c."""
    from attn_core import ledger

    B, N, d, H, c = 2, 64, 32, 4, 4
    fused = ledger.block_ledger(B, N, d, H, attention="fused", dropout=False, dtype="fp32")
    share = par.per_rank_activations(fused, c=c, attention="fused")
    ring = par.cp_ledger(B, N, H, d // H, c, bytes_per_value=4)
    assert [share[k] for k in ("Q", "K", "V", "ctx", "attn.lse")] == [
        ring[k] for k in ("q", "k", "v", "out", "logsumexp")]
    assert sum(share.values()) * c == sum(fused.values())
    eager = ledger.block_ledger(B, N, d, H, attention="eager", dropout=False, dtype="fp32")
    kept = par.per_rank_activations(eager, c=c, attention="eager")
    assert kept["K"] == eager["K"] and kept["V"] == eager["V"] and kept["P"] * c == eager["P"]
    with pytest.raises(ValueError, match="attention"):
        par.per_rank_activations(eager, c=c, attention="flash")
