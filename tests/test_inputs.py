"""What ozaki.matmul takes: read-only arrays, integers float64 holds exactly, accuracies whose
bound means something; and the clear errors for the rest."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from exact_reference import assert_same_bits, exact_matmul

import ozaki
from ozaki import operands

# The widest lossless row of float64 values: from below 2^1024 down to 2^-1074.
WIDEST_ROW = 1024 + 1074


def _read_only(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.flags.writeable = False
    return x


_READ_ONLY = {
    "flag_cleared": lambda x: _read_only(x),
    "broadcast_view": lambda x: np.broadcast_to(x, x.shape),
    "from_bytes": lambda x: np.frombuffer(x.tobytes(), dtype=np.float64).reshape(x.shape),
}


@pytest.mark.parametrize("name", _READ_ONLY)
def test_read_only_arrays_work_without_a_warning_and_stay_unchanged(name):
    rng, make = np.random.default_rng(1), _READ_ONLY[name]
    a, b = make(rng.standard_normal((3, 4))), make(rng.standard_normal((4, 2)))
    assert not a.flags.writeable and not b.flags.writeable
    before = a.copy(), b.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ozaki.matmul(a, b, accuracy="exact")
    assert_same_bits(got, exact_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b)))
    assert_same_bits(a, before[0]) and assert_same_bits(b, before[1])


@pytest.mark.parametrize("name", _READ_ONLY)
def test_a_read_only_array_is_not_copied(name):
    # Shared, as a writable array is: a copy would double a large operand's footprint.
    a = _READ_ONLY[name](np.ones((3, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = operands.as_operand_tensor(a, "a", None)
    assert t.data_ptr() == a.ctypes.data


_BEYOND = 2**53 + 1
# Rows of two integers, one of them past what float64 holds exactly.
_TOO_WIDE = {
    "numpy int64 above": lambda: np.array([[_BEYOND, 1]], dtype=np.int64),
    "numpy int64 below": lambda: np.array([[1, -_BEYOND]], dtype=np.int64),
    "numpy int64 least": lambda: np.array([[-2**63, 0]], dtype=np.int64),
    "numpy uint64": lambda: np.array([[2**64 - 1, 0]], dtype=np.uint64),
    "python ints": lambda: [[_BEYOND, 0]],
    "torch int64": lambda: torch.tensor([[3, -_BEYOND]], dtype=torch.int64),
    "torch uint64 below 2^63": lambda: torch.tensor([[2**60, 0]], dtype=torch.uint64),
    "torch uint64 from 2^63": lambda: torch.tensor([[2**64 - 1, 0]], dtype=torch.uint64),
}


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("make", _TOO_WIDE)
def test_integers_float64_would_round_are_refused_with_the_fix(make, side):
    wide = _TOO_WIDE[make]()  # 1 x 2
    like = torch.from_numpy if isinstance(wide, torch.Tensor) else np.asarray
    operands = (wide, like(np.ones((2, 1)))) if side == "a" else (like(np.ones((1, 1))), wide)
    with pytest.raises(ValueError) as info:
        ozaki.matmul(*operands, accuracy="exact")
    message = str(info.value)
    assert f"{side} holds integers beyond 2^53" in message and "float64" in message and "rounding" in message, message


_EXACT_INTEGERS = {
    "numpy int64 at 2^53": lambda: np.array([[2**53, -(2**53)]], dtype=np.int64),
    "numpy uint64 at 2^53": lambda: np.array([[2**53, 7]], dtype=np.uint64),
    "numpy int32": lambda: np.array([[2**31 - 1, -(2**31)]], dtype=np.int32),
    "torch int64 at 2^53": lambda: torch.tensor([[2**53, -(2**53)]], dtype=torch.int64),
    "torch uint64 at 2^53": lambda: torch.tensor([[2**53, 1]], dtype=torch.uint64),
}


@pytest.mark.parametrize("make", _EXACT_INTEGERS)
def test_integers_float64_holds_are_taken(make):
    x = _EXACT_INTEGERS[make]()
    as_float = np.asarray(x.double().numpy() if isinstance(x, torch.Tensor) else x.astype(np.float64))
    y = np.array([[1.0], [0.5]])
    got = ozaki.matmul(x, torch.from_numpy(y) if isinstance(x, torch.Tensor) else y, accuracy="exact")
    got = got.numpy() if isinstance(got, torch.Tensor) else got
    assert_same_bits(got, exact_matmul(as_float, y))


@pytest.mark.parametrize("accuracy", [1, 2, 53, 1000, WIDEST_ROW])
def test_accuracies_up_to_the_widest_row_are_taken(accuracy):
    ozaki.matmul(np.ones((2, 2)), np.ones((2, 2)), accuracy=accuracy)


@pytest.mark.parametrize("accuracy", [0, -1, WIDEST_ROW + 1, 2200, 10**6])
def test_accuracies_past_the_meaningful_range_name_it_and_exact(accuracy):
    with pytest.raises(ValueError) as info:
        ozaki.matmul(np.ones((2, 2)), np.ones((2, 2)), accuracy=accuracy)
    message = str(info.value)
    assert re.search(rf"\[1, {WIDEST_ROW}\]", message) and "'exact'" in message, message


def test_the_widest_accuracy_is_the_exact_product_and_one_bit_fewer_is_not():
    # A row spanning every float64 exponent, DBL_MAX's top bit down to 2^-1074: 2098 bits keep
    # it whole, as "exact" does; 2097 drop its last bit (a tie, to even: 0).
    a = np.array([[np.finfo(np.float64).max, 5e-324]])
    b = np.array([[0.0], [1.0]])
    assert_same_bits(ozaki.matmul(a, b, accuracy=WIDEST_ROW), np.array([[5e-324]]))
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact"), np.array([[5e-324]]))
    assert_same_bits(ozaki.matmul(a, b, accuracy=WIDEST_ROW - 1), np.array([[0.0]]))
