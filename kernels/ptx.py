"""A kernel compiled for a CUDA target without a GPU: the one recipe behind every stage
module's ``compile_ptx`` and the checker's static check (``kernels.check.ptx``).

Each caller keeps what is specific to its kernel: the Triton type of every argument, the
constexprs, and which arguments a launch specializes as multiples of 16.
"""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.interpreter import InterpretedFunction

__all__ = ["LAUNCH_OPTIONS", "SassInstruction", "compile_kernel", "compile_ptx", "registers", "sass_listing",
           "sass_opcodes"]

# Options every kernel of this package is launched and compiled with.  Float multiply-adds
# fused (FFMA, DFMA): Triton's default through 3.9, which says it will not fuse by default from
# 3.10 on; the tests and the record's timings are of the fused kernels, and unfused each
# float64 multiply-add of the decode's and the encode's sums would take two instructions.
LAUNCH_OPTIONS = {"enable_fp_fusion": True}


def compile_kernel(fn, signature: Mapping[str, str], constexprs: Mapping[str, object], *,
                   divisible: Iterable[str] = (), capability: int = 90, **options):
    """``fn`` (a ``@triton.jit`` or ``@gluon.jit`` kernel) compiled for ``sm_<capability>``: Triton's compiled
    kernel, whose ``asm`` holds the PTX and the cubin and ``metadata`` the shared memory.

    ``signature`` gives every argument its Triton type (``"*fp64"``, ``"i32"``, ...;
    ``"constexpr"`` for those in ``constexprs``).  ``divisible`` names the arguments to
    compile as multiples of 16, as a launch specializes them for 16-byte aligned pointers
    (torch's allocations) and sizes or strides that are; that is what enables vector loads.
    ``options`` are Triton's compile options (``num_warps``, ``num_stages``).

    Needs compiled kernels: under ``TRITON_INTERPRET=1`` every kernel is an interpreter
    object, so run this in a process without that variable."""
    if isinstance(fn, InterpretedFunction):
        raise RuntimeError("compiling a kernel for a GPU target needs compiled kernels: "
                           "run it in a process without TRITON_INTERPRET=1")
    names, divisible = list(fn.arg_names), list(divisible)
    unknown = sorted(set(divisible) - set(names))
    if unknown:
        raise ValueError(f"divisible names {unknown}, which are not arguments of the kernel")
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    source = (GluonASTSource if fn.is_gluon() else ASTSource)(fn, dict(signature), dict(constexprs), attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={**LAUNCH_OPTIONS, **options})


def compile_ptx(fn, signature: Mapping[str, str], constexprs: Mapping[str, object], *,
                divisible: Iterable[str] = (), capability: int = 90, **options) -> str:
    """The PTX of :func:`compile_kernel`."""
    return compile_kernel(fn, signature, constexprs, divisible=divisible, capability=capability,
                          **options).asm["ptx"]


class SassInstruction(NamedTuple):
    """One instruction of a SASS program (:func:`sass_listing`)."""

    address: int
    predicated: bool
    opcode: str  # modifiers dropped
    operands: str


def _cuobjdump(compiled, option: str) -> str:
    # What the cuobjdump that Triton bundles prints of a compiled kernel's cubin.
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(compiled.asm["cubin"])
        handle.flush()
        return subprocess.run([knobs.nvidia.cuobjdump.path, option, handle.name], capture_output=True, text=True,
                              check=True).stdout


def registers(compiled) -> int:
    """Registers a thread of a compiled kernel (:func:`compile_kernel`) holds: with its threads per
    program, how many of its programs (or of other kernels') an SM's 65,536 registers leave room for."""
    return int(re.search(r"\bREG:(\d+)", _cuobjdump(compiled, "-res-usage")).group(1))


def sass_listing(compiled) -> list[SassInstruction]:
    """The SASS program of a compiled kernel (:func:`compile_kernel`) in address order, by the
    cuobjdump that Triton bundles."""
    sass = _cuobjdump(compiled, "-sass")
    # Lines like "/*0090*/  @!P0 DFMA R4, R2, UR4, R4 ;".
    return [SassInstruction(int(match.group(1), 16), bool(match.group(2)), match.group(3), match.group(4).strip())
            for match in re.finditer(r"^\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)[.\w]*([^;\n]*);",
                                     sass, re.MULTILINE)]


def sass_opcodes(compiled) -> collections.Counter:
    """The SASS instructions of a compiled kernel by opcode, counted in its program text (both
    sides of a branch count; a loop's body once): what an issue-bound kernel's speed follows."""
    return collections.Counter(instruction.opcode for instruction in sass_listing(compiled))
