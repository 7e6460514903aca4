"""kernels.dispatch: a launch goes through Triton for each new specialization and straight to the
compiled kernel's launcher after, with the arguments Triton's own launch would pass."""

from types import SimpleNamespace

import pytest
import torch
from triton.backends.compiler import BaseBackend

from kernels import dispatch, scaling

GRID = (3, 2)


class _Compiled:
    """What Triton's launch returns: a compiled kernel whose launcher records its calls."""

    def __init__(self, calls: list):
        self.function, self.packed_metadata = "function", "metadata"
        self.run = lambda *launch_args: calls.append(("direct", launch_args))


class _Kernel:
    """A JIT kernel as the dispatch sees it: its parameters, its per-device caches (the backend
    in fourth place) and ``kernel[grid](...)``, which records a launch through Triton."""

    def __init__(self, names: tuple[str, ...], defaults: dict):
        self.params = [SimpleNamespace(name=name, has_default=name in defaults, default=defaults.get(name))
                       for name in names]
        self.device_caches = {0: (None, None, None, BaseBackend, None)}
        self.calls: list = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append(("triton", grid, args, kwargs))
            return _Compiled(self.calls)
        return run


@pytest.fixture
def fake_device(monkeypatch):
    active = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 77)
    monkeypatch.setattr(dispatch, "driver", SimpleNamespace(active=active))
    monkeypatch.setattr(dispatch, "_DIRECT", True)
    monkeypatch.setattr(dispatch, "_COMPILED_KINDS", (_Kernel,))
    monkeypatch.setattr(dispatch, "_COMPILED", {})


def _kinds(kernel: _Kernel) -> list[str]:
    return [call[0] for call in kernel.calls]


def test_later_launches_pass_the_arguments_and_the_constexprs_in_parameter_order(fake_device):
    kernel = _Kernel(("x_ptr", "n", "BLOCK", "EVEN"), defaults={"EVEN": False})
    x = torch.zeros(64, dtype=torch.float64)
    dispatch.launch(kernel, GRID, x, 64, BLOCK=32, num_warps=4)
    dispatch.launch(kernel, GRID, x, 64, BLOCK=32, num_warps=4)
    assert _kinds(kernel) == ["triton", "direct"]
    # grid (padded to three axes), stream, function, metadata, no launch metadata or hooks, then
    # every parameter: the positional ones, the keyword, the default.
    assert kernel.calls[1][1] == (3, 2, 1, 77, "function", "metadata", None, None, None, x, 64, 32, False)


@pytest.mark.parametrize("first, second", [
    ((torch.zeros(64, dtype=torch.float64), 64), (torch.zeros(64, dtype=torch.float64)[1:], 64)),  # alignment
    ((torch.zeros(64, dtype=torch.float64), 64), (torch.zeros(64, dtype=torch.int64), 64)),  # dtype
    ((torch.zeros(64, dtype=torch.float64), 64), (torch.zeros(64, dtype=torch.float64), 63)),  # multiple of 16
    ((torch.zeros(64, dtype=torch.float64), 2), (torch.zeros(64, dtype=torch.float64), 1)),  # equal to 1
    ((torch.zeros(64, dtype=torch.float64), 64), (torch.zeros(64, dtype=torch.float64), 2**40)),  # int64
    ((torch.zeros(64, dtype=torch.float64), 64), (None, 64)),  # None
])
def test_a_launch_triton_would_specialize_differently_goes_through_triton(fake_device, first, second):
    kernel = _Kernel(("x_ptr", "n", "BLOCK"), defaults={})
    for args in (first, second, first, second):
        dispatch.launch(kernel, GRID, *args, BLOCK=32)
    assert _kinds(kernel) == ["triton", "triton", "direct", "direct"]


def test_another_constexpr_or_option_goes_through_triton(fake_device):
    kernel = _Kernel(("x_ptr", "BLOCK"), defaults={})
    x = torch.zeros(64, dtype=torch.float64)
    for kwargs in ({"BLOCK": 32}, {"BLOCK": 64}, {"BLOCK": 32, "num_warps": 8}, {"BLOCK": 64}):
        dispatch.launch(kernel, GRID, x, **kwargs)
    assert _kinds(kernel) == ["triton", "triton", "triton", "direct"]


def test_equal_specializations_share_the_compiled_kernel(fake_device):
    kernel = _Kernel(("x_ptr", "n", "BLOCK"), defaults={})
    dispatch.launch(kernel, GRID, torch.zeros(64, dtype=torch.float64), 32, BLOCK=32)
    dispatch.launch(kernel, GRID, torch.ones(128, dtype=torch.float64), 48, BLOCK=32)
    assert _kinds(kernel) == ["triton", "direct"]


def test_a_parameter_left_to_triton_keeps_every_launch_on_triton(fake_device):
    # "n" has neither a keyword nor a default: Triton would raise, so it must see every launch.
    kernel = _Kernel(("x_ptr", "n", "BLOCK"), defaults={})
    for _ in range(2):
        dispatch.launch(kernel, GRID, torch.zeros(64, dtype=torch.float64), BLOCK=32)
    assert _kinds(kernel) == ["triton", "triton"]


def test_an_argument_without_a_specialization_goes_through_triton(fake_device):
    kernel = _Kernel(("values", "BLOCK"), defaults={})
    for _ in range(2):
        dispatch.launch(kernel, GRID, [1, 2], BLOCK=32)
    assert _kinds(kernel) == ["triton", "triton"]


@pytest.mark.parametrize("target, name, value", [
    (dispatch.knobs.runtime, "launch_enter_hook", lambda metadata: None),  # a profiler's hook
    (dispatch, "_COMPILED_KINDS", ()),  # anything but a JIT kernel (a wrapper, the interpreter's)
    (dispatch, "_DIRECT", False),  # OZAKI_DIRECT_LAUNCH=0
])
def test_every_launch_goes_through_triton(fake_device, monkeypatch, target, name, value):
    monkeypatch.setattr(target, name, value)
    kernel = _Kernel(("x_ptr", "BLOCK"), defaults={})
    for _ in range(2):
        dispatch.launch(kernel, GRID, torch.zeros(64, dtype=torch.float64), BLOCK=32)
    assert _kinds(kernel) == ["triton", "triton"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the direct launch runs compiled kernels on CUDA")
def test_direct_launches_give_triton_launches_results_on_the_device(monkeypatch):
    # Aligned and 8-byte-offset rows, alternately: each specialization's later launches are
    # direct, and every result equals the reference's.
    monkeypatch.setattr(dispatch, "_DIRECT", True)
    monkeypatch.setattr(dispatch, "_COMPILED", {})
    generator = torch.Generator(device="cuda").manual_seed(3)
    base = torch.randn((65, 96), dtype=torch.float64, device="cuda", generator=generator)
    views = (base[:64], base.view(-1)[1:1 + 64 * 96].view(64, 96))
    for _ in range(3):
        for x in views:
            (got,) = scaling.row_extents_kernel(x)
            want = scaling.reference_row_extents(x)
            assert torch.equal(got.row_max, want.row_max) and torch.equal(got.lowest_bit, want.lowest_bit)
    (compiled,) = dispatch._COMPILED.values()
    assert len(compiled) == 2 and all(direct is not None for direct in compiled.values())
