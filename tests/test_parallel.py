"""attn_core.parallel run for real: process groups of 2 and 4 ranks (gloo, 127.0.0.1), started here.

One 4-rank launch runs every experiment (the 2-rank ones in a subgroup of ranks 0 and 1), so the
processes start once; each test then checks one experiment's results (ring attention, all-to-all
attention, tensor parallelism) in float64 against the single-process reference. launch() bounds
every run in time and kills what is left, and a failing rank is reported, not waited on
(test_a_failing_rank_does_not_hang).
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
    # grouped-query attention: H_kv < H key/value heads travel; peak memory measured on two of them
    "GQA contiguous causal N=13 P=4": (4, dict(B=1, H=4, H_kv=2, N=13, D=5, causal=True, measure_peak=True)),
    "GQA zigzag causal N=16 P=4": (4, dict(B=2, H=6, H_kv=2, N=16, D=4, D_v=3, causal=True, layout="zigzag")),
    "GQA contiguous full N=7 P=2": (2, dict(B=1, H=4, H_kv=1, N=7, D=3, causal=False)),
    "contiguous causal N=32 P=4 (peak)": (4, dict(B=1, H=2, N=32, D=4, causal=True, measure_peak=True)),
}
BF16 = {  # bfloat16 inputs: float32 accumulators, logsumexp and dK, dV in flight (4 bytes a value)
    "bf16 GQA zigzag causal N=16 P=4": (4, dict(B=1, H=4, H_kv=2, N=16, D=8, causal=True, layout="zigzag",
                                              dtype=torch.bfloat16)),
}
ULYSSES = {  # all-to-all context parallelism: c divides H and H_kv; N = 13 and 7 uneven
    "Ulysses causal N=13 P=4": (4, dict(B=1, H=4, N=13, D=5, causal=True)),
    "Ulysses GQA full N=12 P=4": (4, dict(B=2, H=8, H_kv=4, N=12, D=4, D_v=3, causal=False)),
    "Ulysses GQA causal N=16 P=4": (4, dict(B=1, H=8, H_kv=4, N=16, D=3, causal=True)),
    "Ulysses GQA causal N=7 P=2": (2, dict(B=1, H=4, H_kv=2, N=7, D=3, causal=True)),
    "Ulysses full N=8 P=2": (2, dict(B=2, H=2, N=8, D=5, causal=False)),
}
TP = {  # name: (ranks, spec)
    "TP P=4": (4, dict(B=2, N=8, d=16, H=4, F=24, sequence_parallel=False)),
    "TP+SP P=4": (4, dict(B=2, N=8, d=16, H=4, F=24, sequence_parallel=True)),
    "TP P=2": (2, dict(B=1, N=6, d=12, H=2, F=20, sequence_parallel=False)),
    "TP+SP P=2": (2, dict(B=1, N=6, d=12, H=2, F=20, sequence_parallel=True)),
}
JOBS = ([(name, "ring", spec, ranks) for name, (ranks, spec) in {**RING, **BF16}.items()]
        + [(name, "ulysses", spec, ranks) for name, (ranks, spec) in ULYSSES.items()]
        + [(name, "tp", spec, ranks) for name, (ranks, spec) in TP.items()]
        + [("errors P=4", parallel_workers.worker_errors, None, 4),
           ("errors P=2", parallel_workers.worker_errors, None, 2)])


@pytest.fixture(scope="module")
def results():
    """Every experiment's per-rank results (rank order), from one 4-rank run."""
    per_rank = par.launch(par.worker_suite, 4, JOBS, timeout=150)
    return {name: [r[name] for r in per_rank if r[name] is not None] for name, *_ in JOBS}


def _reference(spec):
    """Single-process attention, its gradients, in float64 (GQA: each K, V head repeated to its
    H/H_kv query heads, so autograd sums their gradients)."""
    q, k, v, dout = (t.double() for t in par.ring_inputs(spec))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    g = spec["H"] // spec.get("H_kv", spec["H"])
    mask = causal_mask(spec["N"]) if spec.get("causal", True) else None
    out = scaled_dot_product_attention(q, k.repeat_interleave(g, -3), v.repeat_interleave(g, -3), mask)
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


@pytest.mark.parametrize("name", BF16)
def test_ring_attention_in_bfloat16_is_attention_to_bfloat16_rounding(results, name):
    """bfloat16 inputs (8 bits of mantissa: one rounding is 2^-9 relative): the reassembled output and
    gradients are within 2e-2 of float64 attention on the same (rounded) inputs, since the ring
    accumulates in float32; the inputs' gradients come back in bfloat16."""
    ranks, spec = BF16[name]
    layout = spec.get("layout", "contiguous")
    for key, ref in zip(("out", "dq", "dk", "dv"), _reference(spec)):
        got = par.unshard_sequence([r[key] for r in results[name]], layout)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.double(), ref, rtol=2e-2, atol=2e-2,
                                   msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("name", [*RING, *BF16])
def test_ring_saved_and_sent_equal_the_ledger(results, name):
    """Each rank saves q, k, v, out and a logsumexp of its shard (float32 for 16-bit inputs).

    It sends c - 1 K, V blocks (H_kv heads, in the inputs' dtype) forward, and c - 1 K, V blocks and
    c - 1 dK, dV accumulators (float32 for 16-bit inputs) backward: attn_core.formulas.cp_saved, cp_sent.
    """
    ranks, spec = {**RING, **BF16}[name]
    runs = results[name]
    d_v, h_kv = spec.get("D_v", spec["D"]), spec.get("H_kv", spec["H"])
    b = spec.get("dtype", torch.float64).itemsize
    lens = [r["out"].shape[-2] for r in runs]
    for r, n in zip(runs, lens):  # the formula at this rank's own shard length n = N / c
        items = par.cp_ledger(spec["B"], n * ranks, spec["H"], spec["D"], ranks, D_v=d_v, H_kv=h_kv,
                              bytes_per_value=b)
        assert r["saved"] == sum(items.values())
    if len(set(lens)) == 1:  # equal shards: every rank sends exactly the formula
        expected = par.comm_bytes("CP", B=spec["B"], N=spec["N"], degree=ranks, H=spec["H"], D=spec["D"],
                                  D_v=d_v, H_kv=h_kv, bytes_per_value=b)
        for r in runs:
            assert {**r["sent_fwd"], **r["sent_bwd"]} == expected
    else:  # uneven shards: rank r forwards every K, V shard but the next rank's
        block = [spec["B"] * h_kv * n * (spec["D"] + d_v) * b for n in lens]
        for rank, r in enumerate(runs):
            assert r["sent_fwd"]["ring K, V (forward)"] == sum(block) - block[(rank + 1) % ranks]


def test_gqa_ring_sends_h_kv_heads_and_keeps_float32_accumulators():
    """The ring's bytes scale with H_kv: Llama 3 70B (64 query heads, 8 key/value heads) sends 8 times
    fewer bytes than the same model with MHA would; in bf16 the dK, dV accumulators travel in float32
    (twice a K, V block's bytes) and the logsumexp is saved at 4 bytes."""
    shape = dict(B=1, N=131072, degree=16, H=64, D=128, bytes_per_value=2)
    gqa, mha = par.comm_bytes("CP", **shape, H_kv=8), par.comm_bytes("CP", **shape)
    assert {k: mha[k] / gqa[k] for k in gqa} == dict.fromkeys(gqa, 8)
    assert gqa["ring dK, dV (backward)"] == 2 * gqa["ring K, V (backward)"]
    saved = par.cp_ledger(1, 4096, 64, 128, 4, H_kv=8, bytes_per_value=2)
    assert saved["logsumexp"] == 1 * 64 * 1024 * 4 and saved["k"] * 8 == saved["q"]
    with pytest.raises(ValueError, match="H_kv"):
        par.cp_ledger(1, 64, 6, 8, 4, H_kv=4)


@pytest.mark.parametrize("name", [n for n, (_, spec) in RING.items() if spec.get("measure_peak")])
def test_ring_peak_holds_score_blocks_the_saved_ledger_does_not(results, name):
    """Nothing N x N is saved, yet each step builds (n x n) score blocks: PyTorch's memory tracker sees
    a peak per rank above what the rank saves by at least two such blocks (scores and weights of all H
    heads), forward; forward and backward together peak higher still."""
    ranks, spec = RING[name]
    for r in results[name]:
        n = r["out"].shape[-2]
        block = spec["B"] * spec["H"] * n * n * 8  # one (n x n) float64 block of every query head
        assert r["peak_forward"] >= r["saved"] + 2 * block
        assert r["peak"] >= r["peak_forward"]


def test_ring_backward_posts_each_accumulator_before_the_next_compute(results):
    """Backward, c = 4: the dK, dV accumulator of step s is posted before the K, V exchange of step
    s + 1 (which starts that step's compute) and is waited on only after that compute (its wait is
    recorded after the step's compute: None at steps 0 and 1, which receive none); the last one,
    bringing each rank's own accumulator home, has nothing left to hide behind (final_wait_s)."""
    for r in results["contiguous causal N=13 P=4"]:
        order = [what for what, _ in r["sends_bwd"]]
        kv, dkv = "ring K, V (backward)", "ring dK, dV (backward)"
        assert order == [kv, kv, dkv, kv, dkv, dkv]
        steps = r["stats"]["backward"]["steps"]
        assert [s["wait_dkv_s"] is None for s in steps] == [True, True, False, False]
        assert r["stats"]["backward"]["final_wait_s"] >= 0


@pytest.mark.parametrize("name", ULYSSES)
def test_ulysses_attention_equals_full_attention(results, name):
    """All-to-all context parallelism: output shards and the gradients of q, k, v reassemble into one
    process's attention (float64), GQA and uneven shards included."""
    ranks, spec = ULYSSES[name]
    runs = results[name]
    assert len(runs) == ranks
    for key, ref in zip(("out", "dq", "dk", "dv"), _reference(spec)):
        got = par.unshard_sequence([r[key] for r in runs])
        torch.testing.assert_close(got, ref, **TOL, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("name", ULYSSES)
def test_ulysses_sent_equals_the_formula(results, name):
    """Bytes each rank passed to all_to_all for other ranks, counted from the shapes: a tensor that
    holds the rank's n_r tokens of h heads sends h - h/c heads of them (q, k, v forward; the output's
    gradient backward); one that holds h/c heads of all N tokens sends the N - n_r tokens other ranks
    hold (the output forward; the gradients of q, k, v backward). With equal shards the two are the
    same, attn_core.formulas.ulysses_sent."""
    ranks, spec = ULYSSES[name]
    B, H, N, D = spec["B"], spec["H"], spec["N"], spec["D"]
    h_kv, d_v = spec.get("H_kv", H), spec.get("D_v", D)
    width = H * D + h_kv * (D + d_v)  # values of one token of q, k and v, all heads
    for r in results[name]:
        n = r["out"].shape[-2]
        want = {"all-to-all q, k, v (forward)": B * n * width * (ranks - 1) // ranks * 8,
                "all-to-all out (forward)": B * (H // ranks) * (N - n) * d_v * 8,
                "all-to-all dout (backward)": B * n * (H - H // ranks) * d_v * 8,
                "all-to-all dq, dk, dv (backward)": B * (N - n) * width // ranks * 8}
        assert {**r["sent_fwd"], **r["sent_bwd"]} == want
        if N % ranks == 0:
            assert want == par.comm_bytes("Ulysses", B=B, N=N, degree=ranks, H=H, D=D, D_v=d_v, H_kv=h_kv,
                                          bytes_per_value=8)


def test_time_model():
    """latency + bytes / bandwidth; the fewest tokens per rank that hide a forward step's transfer solve
    compute = transfer, and without latency equal H_kv b pi / (2 H c_causal beta_l)."""
    from attn_core.formulas import ring_hide_tokens, ring_step, transfer_time

    assert transfer_time(1e6, 1e-5, 1e9) == pytest.approx(1e-5 + 1e-3)
    model = dict(H=64, H_kv=8, D=128, D_v=128, b=2, beta_l=50e9, pi=989e12)
    for alpha in (0.0, 20e-6):
        for c_causal in (1, 0.5):
            n = ring_hide_tokens(**model, c_causal=c_causal, alpha=alpha)
            step = ring_step(B=1, N=n, c=1, c_causal=c_causal, alpha=alpha, **model)
            assert step["compute (forward)"] == pytest.approx(step["transfer (forward)"], rel=1e-9)
    n0 = ring_hide_tokens(**model, c_causal=1, alpha=0.0)
    assert n0 == pytest.approx(8 * 2 * 989e12 / (2 * 64 * 50e9))
    assert ring_hide_tokens(**{**model, "H_kv": 64}, c_causal=1, alpha=0.0) == pytest.approx(8 * n0)


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
             "SP, N not divisible by t": "x: mismatched shards: sequence parallelism needs N divisible by t",
             "GQA, H not a multiple of H_kv": "q, k: the query heads H (dim -3 of q) must be a multiple",
             "Ulysses, c does not divide H": "must divide the query heads H",
             "Ulysses, c does not divide H_kv": "must divide the query heads H"}
    for case, word in words.items():
        messages = [r[case] for r in runs]
        assert all(m is not None and word in m for m in messages), (case, messages)
        assert len(set(messages)) == 1, (case, messages)  # the same error everywhere
    assert all(r["then a correct call"][-2] > 0 and r["then a correct Ulysses call"][-2] > 0 for r in runs)


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
    with pytest.raises(ValueError, match="group: no initialized"):
        par.ulysses_attention(x, x, x)


def test_a_failing_rank_does_not_hang():
    """Rank 1 raises while rank 0 waits for it in the ring: launch() reports rank 1, nothing is left."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 failed:(.|\n)*on purpose"):
        par.launch(parallel_workers.worker_fail, 2, timeout=60)
    assert time.monotonic() - t0 < 60
    assert multiprocessing.active_children() == []


def test_ledger_formulas():
    """The SymPy ledgers: Korthikanti et al.'s totals, and the ring's three passes (equal in float32;
    in bf16 the dK, dV accumulators, float32, send twice a K, V pass)."""
    import sympy as sp

    s, b, h, a, t = sp.symbols("s b h a t", positive=True, integer=True)
    total = {key: par.to_paper_letters(sum(par.korthikanti_exprs(*flags).values()))
             for key, flags in {"none": (False, False), "TP": (True, False), "TP+SP": (True, True)}.items()}
    assert sp.simplify(total["none"] - s * b * h * (34 + 5 * a * s / h)) == 0
    assert sp.simplify(total["TP"] - s * b * h * (10 + 24 / t + 5 * a * s / (h * t))) == 0
    assert sp.simplify(total["TP+SP"] - (34 * s * b * h / t + 5 * a * s**2 * b / t)) == 0
    cp = par.comm_bytes("CP", B=1, N=64, degree=4, H=2, D=8)  # bf16: the dK, dV accumulators in float32
    assert cp["ring K, V (forward)"] == cp["ring K, V (backward)"] == 3 * 2 * 16 * 16 * 2
    assert cp["ring dK, dV (backward)"] == 2 * cp["ring K, V (forward)"]
    assert len(set(par.comm_bytes("CP", B=1, N=64, degree=4, H=2, D=8, bytes_per_value=4).values())) == 1
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
