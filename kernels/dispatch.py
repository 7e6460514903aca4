"""Launching a compiled kernel again without Triton's per-call dispatch.

``kernel[grid](*args, **constexprs)`` re-derives on every call what Triton compiled the kernel
for: it binds every parameter, specializes each argument, builds and looks up the cache key,
re-checks the globals the kernel read, and only then calls the launcher.  That costs tens of
microseconds of host time a launch (benchmarks/kernels.md, "The rule's passes at 8192"),
which the device waits out wherever its kernels are shorter than their launches: before the
plan's read at every size up to 8192, where a call makes a dozen small launches.

:func:`launch` does the same launch through Triton the first time for each *specialization*
and keeps the compiled kernel it returns; later launches with the same specialization call
the compiled kernel's launcher directly.  The specialization is computed with Triton's own
per-argument rule (``native_specialize_impl``, with specialization and alignment on for every
argument, so at least as fine as Triton's key) together with the keyword arguments (the
constexprs and the launch options) and the device, so a launch that Triton would compile
differently (another dtype, a pointer that is not 16-byte aligned, a size that is or is not
a multiple of 16 or equal to 1, another constexpr) misses and goes through Triton.  The
globals a kernel reads are module constants that are checked on each first launch.

It is on by default and switched off by ``OZAKI_DIRECT_LAUNCH=0`` in the environment, read at
import (benchmarks/kernels.md, "Launches without Triton's dispatch": the same bits as Triton's
launches on an H100, and what it saves).  Switched off, under Triton's interpreter, for anything
but a JIT kernel, with a launch hook installed (a profiler's), or for arguments the rule does not
cover, every launch goes through Triton as written.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from triton import knobs
from triton._C.libtriton import native_specialize_impl
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

__all__ = ["launch"]

# Direct launches unless this is "0" (see the module docstring).
_DIRECT = os.environ.get("OZAKI_DIRECT_LAUNCH", "1") != "0"


class _Direct(NamedTuple):
    """A kernel compiled for one specialization, and what its launcher takes after the grid."""

    launcher: Any
    function: Any
    metadata: Any
    tail: tuple  # the parameters after the positional arguments, in order: keywords or defaults


# What is launched directly: Triton's and Gluon's JIT kernels (not the interpreter's, nor a wrapper).
_COMPILED_KINDS: tuple[type, ...] = (JITFunction,)

# kernel → {specialization: _Direct, or None where the launch must go through Triton}
_COMPILED: dict[object, dict[tuple, _Direct | None]] = {}
_MISSING = object()


def launch(kernel, grid: tuple[int, ...], *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``: ``args`` the leading parameters (tensors, ints, None),
    ``kwargs`` the rest of the parameters (constexprs) and launch options (``num_warps``...)."""
    if not _DIRECT or not isinstance(kernel, _COMPILED_KINDS) or _hooked():
        kernel[grid](*args, **kwargs)
        return
    device = driver.active.get_current_device()
    try:
        # What Triton's own key holds beside the arguments: the debug and instrumentation knobs.
        key = (device, knobs.runtime.debug, knobs.compilation.instrumentation_mode,
               _specialization(kernel.device_caches[device][3], args), *kwargs.items())
        direct = _COMPILED.setdefault(kernel, {}).get(key, _MISSING)
    except (TypeError, ValueError):  # an argument the rule does not cover, or an unhashable keyword
        kernel[grid](*args, **kwargs)
        return
    if direct is _MISSING:
        _COMPILED[kernel][key] = _direct(kernel, kernel[grid](*args, **kwargs), len(args), kwargs)
    elif direct is None:
        kernel[grid](*args, **kwargs)
    else:
        direct.launcher(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                        driver.active.get_current_stream(device), direct.function, direct.metadata, None, None,
                        None, *args, *direct.tail)


def _hooked() -> bool:
    """Whether a launch hook is installed (a profiler's): it takes what Triton's launch makes."""
    return any(hook is not None and bool(getattr(hook, "calls", True))
               for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _specialization(backend, args: tuple) -> tuple:
    """Triton's specialization of each positional argument (its type; for a pointer whether it
    is 16-byte aligned, for an int whether it is 1 or a multiple of 16), with every argument
    specialized, so at least as fine as any launch's key.  TypeError for an argument whose
    specialization cannot be a key."""
    specs = tuple(native_specialize_impl(backend, arg, False, True, True) for arg in args)
    hash(specs)
    return specs


def _direct(kernel, compiled, positional: int, kwargs: dict) -> _Direct | None:
    """The launcher of ``compiled`` for later launches, or None where the parameters after the
    positional ones are not all keywords or defaults (those go through Triton every time)."""
    if hasattr(compiled, "result"):  # compiled in the background
        compiled = compiled.result()
    try:
        launcher, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    except AttributeError:
        return None
    tail = []
    for param in kernel.params[positional:]:
        if param.name in kwargs:
            tail.append(kwargs[param.name])
        elif param.has_default:
            tail.append(param.default)
        else:
            return None
    return _Direct(launcher, function, metadata, tuple(tail))
