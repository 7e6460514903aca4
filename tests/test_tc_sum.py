"""kernels.tc_sum: exact integer sums, fixed order, enforced bounds (interpreter on CPU, small shapes)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.tc_sum import TC_SUM_CONFIGS, tc_sum, tc_sum_reference
from kernels.check import classes, families
from kernels.check.classes import TC_SUM_TYPES
from kernels.tc_sum import FP32_EXACT_LIMIT, TC_SUM_DTYPES, segment_length

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The device set (`pytest -m gpu`): on a GPU these compile the kernels and check their bits.
pytestmark = pytest.mark.gpu
TARGET = "sm_90" if torch.cuda.is_available() else "interpreter"
FLOATS = [d for d in TC_SUM_DTYPES if d != torch.int8]


def _exact(x):
    """The exact sum in tc_sum's output type (inputs here keep every float partial sum below 2**24)."""
    if x.dtype == torch.int8:
        return x.to(torch.int64).sum(-1)
    return x.to(torch.float64).sum(-1).to(torch.float32)


def _bits(t):
    return t.cpu().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("config", TC_SUM_CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("dtype", TC_SUM_DTYPES, ids=str)
def test_integer_input_is_summed_exactly_by_every_config(dtype, config):
    x = torch.randint(-8, 9, (3, 2500), generator=torch.Generator().manual_seed(1)).to(dtype)
    got = tc_sum(x.to(DEVICE), **config).cpu()
    assert got.dtype == (torch.int64 if dtype == torch.int8 else torch.float32)
    assert torch.equal(got, _exact(x))
    assert torch.equal(got, tc_sum_reference(x, segment_length(config)))


@pytest.mark.parametrize("shape", [(0,), (4, 0), (1,), (17,), (1024,), (1025,), (2, 3, 700), (1, 5 * 1024 + 3)])
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16], ids=str)
def test_shapes_and_ragged_lengths(dtype, shape):
    x = torch.randint(-128, 128, shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    got = tc_sum(x.to(DEVICE)).cpu()
    assert got.shape == shape[:-1]
    assert torch.equal(got, _exact(x))


def test_int8_extremes_exceed_int32_but_stay_exact():
    # 20000 values of -128 sum to -2560000; per-segment int32 partials, int64 tree.
    x = torch.full((20000,), -128, dtype=torch.int8)
    assert int(tc_sum(x.to(DEVICE))) == -128 * 20000


@pytest.mark.parametrize("dtype, top", [(torch.float16, 2048.0), (torch.bfloat16, 256.0),
                                        (torch.float8_e4m3fn, 448.0)], ids=str)
def test_exact_bound_is_the_last_exact_integer(dtype, top):
    # Alternating top, 1 makes odd partial sums right up to 2**24 - 1, exercising the last bit of fp32.
    pairs = (FP32_EXACT_LIMIT - 1) // int(top + 1)
    rest = FP32_EXACT_LIMIT - 1 - pairs * int(top + 1)
    x = torch.cat([torch.tensor([top, 1.0]).repeat(pairs), torch.ones(rest)]).to(dtype).to(DEVICE)
    assert float(tc_sum(x, exact=True)) == FP32_EXACT_LIMIT - 1
    with pytest.raises(ValueError, match=r"2\*\*24"):
        tc_sum(torch.cat([x, torch.ones(1, dtype=dtype, device=DEVICE)]), exact=True)


@pytest.mark.parametrize("call, error, match", [
    (lambda: tc_sum(torch.ones(8)), TypeError, "cast first"),
    (lambda: tc_sum([1, 2]), TypeError, "torch.Tensor"),
    (lambda: tc_sum(torch.tensor(1, dtype=torch.int8)), ValueError, "at least one dimension"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), BLOCK_M=64), TypeError, "missing"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **TC_SUM_CONFIGS[0], SPLIT_K=2), TypeError, "unknown"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "BLOCK_K": 96}), ValueError,
     "power of two"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "BLOCK_K": 16}), ValueError,
     "K >= 32"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "R": 0}), ValueError, "positive"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "BLOCK_K": 128, "R": 2**17}),
     ValueError, "int32 accumulator"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "num_warps": 3}), ValueError,
     "num_warps"),
    (lambda: tc_sum(torch.ones(8, dtype=torch.int8), **{**TC_SUM_CONFIGS[0], "num_stages": 0}), ValueError,
     "num_stages"),
    (lambda: tc_sum(torch.full((8,), 0.5, dtype=torch.float16), exact=True), ValueError, "integer-valued"),
], ids=["float32", "list", "0-d", "missing-keys", "unknown-key", "block-k", "8-bit-k", "r", "int32-window",
        "warps", "stages", "non-integer"])
def test_rejects_what_it_cannot_sum_exactly(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("family", [f for f in families(TARGET) if f.name.startswith("tc_sum.")],
                         ids=lambda f: f.name)
def test_configs_in_one_class_give_identical_bits_on_float_data(family):
    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 4500, generator=generator) * 2.0 ** torch.randint(-6, 7, (2, 4500), generator=generator))
    dtype = TC_SUM_TYPES[family.operand]
    x = (x.round().clamp(-128, 127) if dtype == torch.int8 else x.clamp(-448, 448)).to(dtype)
    outputs = [_bits(family.launch(x.to(DEVICE), config)) for config in family.configs]
    for cls in classes(family):
        assert all(torch.equal(outputs[i], outputs[cls[0]]) for i in cls), cls


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rows_are_batch_invariant(dtype):
    generator = torch.Generator().manual_seed(6)
    x = (torch.randn(5, 3000, generator=generator) * 64).to(dtype).to(DEVICE)
    whole = tc_sum(x)
    assert torch.equal(_bits(tc_sum(x[1:3])), _bits(whole[1:3]))
    assert torch.equal(_bits(tc_sum(x.flip(0))), _bits(whole.flip(0)))


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 3000), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from(TC_SUM_DTYPES), config=st.sampled_from(TC_SUM_CONFIGS))
def test_property_integer_sums_are_exact(rows, n, seed, dtype, config):
    limit = 127 if dtype == torch.int8 else 16
    x = torch.randint(-limit, limit + 1, (rows, n), generator=torch.Generator().manual_seed(seed)).to(dtype)
    assert torch.equal(tc_sum(x.to(DEVICE), exact=True, **config).cpu(), _exact(x))


SHORT_SEGMENTS = {"BLOCK_M": 64, "BLOCK_K": 32, "R": 1, "num_warps": 4, "num_stages": 2}


def test_tree_over_many_segments_matches_the_reference_bit_for_bit():
    # 1250 segments of 32 take two tree launches (10 levels, then 1).  Each segment repeats one fp16 value,
    # so segment sums are exact and every rounding happens in the tree, whose order is then pinned down.
    generator = torch.Generator().manual_seed(9)
    segments = 1250
    values = (1 + torch.randint(0, 1024, (segments,), generator=generator) / 1024) * torch.exp2(
        torch.randint(-14, 16, (segments,), generator=generator).double())
    values = values * torch.randint(0, 2, (segments,), generator=generator).mul(2).sub(1)
    row = values.repeat_interleave(32)
    # Three rows (the second launch sums several rows a program), one of them reversed.
    x = torch.stack([row, row.flip(0), -row]).to(torch.float16)
    got = tc_sum(x.to(DEVICE), **SHORT_SEGMENTS).cpu()
    assert torch.equal(_bits(got), _bits(tc_sum_reference(x, 32)))
    assert torch.equal(_bits(got[0]), _bits(tc_sum(x[0].to(DEVICE), **SHORT_SEGMENTS).cpu()))
    sequential = torch.zeros((), dtype=torch.float32)
    for partial in (values.to(torch.float16).to(torch.float32) * 32):
        sequential = sequential + partial
    assert not torch.equal(_bits(got[0]), _bits(sequential)), "probe too easy: the tree order went untested"


def test_int8_tree_over_many_segments_is_exact():
    x = torch.randint(-128, 128, (2, 40000), generator=torch.Generator().manual_seed(10), dtype=torch.int8)
    assert torch.equal(tc_sum(x.to(DEVICE), **SHORT_SEGMENTS).cpu(), _exact(x))
