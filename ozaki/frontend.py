"""``ozaki.matmul`` and ``ozaki.explain``: numpy.matmul's semantics around the emulated product.

Arrays go through the emulation as :mod:`ozaki.operands` validates and shapes them; torch
tensors through the torch operator ``ozaki::matmul`` (:mod:`ozaki.operator`), so that
autograd, ``torch.func`` and ``torch.compile`` see one product; arrays of other libraries
(CuPy, JAX, any that implements DLPack) in place, the product returned in their library
(:mod:`ozaki.arrays`).
"""

from __future__ import annotations

import torch

from . import arrays, operator
from .operands import prepare, shape_sends_to_dgemm
from .planning import ProductPlan

__all__ = ["explain", "matmul"]


def matmul(a, b, *, accuracy="fp64", engine: str = "auto"):
    """The float64 (or complex128) matrix product ``a @ b``, emulated with the Ozaki scheme II.

    Semantics are ``numpy.matmul``'s: 1-D operands are promoted to a row/column and the
    added axis removed afterwards, leading (batch) dimensions broadcast.

    A complex product runs as the real one [Ar Ai]·[[Br, Bi], [−Bi, Br]] = [Re C | Im C] of
    2K terms (:mod:`ozaki.operands`), so every accuracy below holds for each part of each
    entry with 2K for K, every engine returns the same bits, and a batch has each product's
    bits; the torch stages form three block products per modulus (Karatsuba) where that real
    product takes four.  A real operand against a complex one costs two real products: each
    part is the real operand's product with that part.

    Parameters
    ----------
    a, b : array_like, torch.Tensor or an array of a library that implements DLPack
        The operands.  numpy (or array-like) operands give a numpy array, torch tensors a
        torch tensor on their device, arrays of another library (CuPy, JAX, array_api_strict,
        any with ``__dlpack__``) an array of that library on their device, read in place and
        multiplied with numpy's rules; JAX arrays also under ``jax.jit``, ``vmap`` and ``grad``
        (:mod:`ozaki.arrays` gives the rule for mixed operands).  Integer, boolean and
        lower-precision float inputs are promoted to float64 (integers only where float64 holds
        them exactly, |x| ≤ 2^53), complex64 to complex128.  Read-only arrays are read in place,
        not copied.
    accuracy : {"fp64", "exact"} or int, default "fp64"
        ``"fp64"``: DGEMM-level.  The bits kept per row of A and column of B follow from an
        exact lower bound of |A||B| (:mod:`ozaki.accuracy`) so that elementwise
        |Ĉ − C| ≤ u|C| + 2^-g·(1 + 2^-19)·√K·u·(|A||B|) + 2^-1075 (u = 2^-53; the last term is
        half the smallest subnormal), g ≥ 4 reported by ``ozaki.explain(...).guard``: √K·2^g
        times inside DGEMM's worst-case bound u|C| + K·u·(|A||B|).  The moduli are the fewest
        those bits need, and every row then keeps all the bits the int8 plan of that need pays
        for, on every engine, so all engines return the same bits (which, unlike "exact",
        depend on the whole of A and B, not on one row and one column).  With the default
        ``engine="auto"`` on a GPU, the product is computed by native float64 matmul (cuBLAS
        DGEMM) unless the cost model (:mod:`ozaki.cost`, fixed per device and shape, never
        timed at call time) predicts the emulation at least 5% faster
        (``ozaki.cost.EMULATION_MARGIN``); the result then carries DGEMM's accuracy and is not
        bitwise reproducible across devices.  A debug message on the ``"ozaki"`` logger says
        which path ran and why.  Pass ``accuracy="exact"`` or an explicit engine for
        guaranteed emulated bits.

        ``"exact"``: the correctly rounded (nearest, ties to even) value of the exact product.

        ``int`` b, 1 ≤ b ≤ 2098: fast mode, each row keeps b bits (at most its lossless
        width); |Ĉ − C| ≤ ε·(max|A_i:|·Σ|B_:j| + Σ|A_i:|·max|B_:j|) + ε²·K·max|A_i:|·max|B_:j|
        + u|C| + 2^-1075 elementwise, ε = 1/(2^b − 1).  No float64 row spans more than 2098
        bits (below 2^1024 down to 2^-1074), so from b = 2098 on every row is lossless and the
        result is ``"exact"``'s: larger numbers are refused.
    engine : {"auto", "reference", "int8", "fp8", "fp4"}, default "auto"
        ``"auto"``: the fastest exact engine for the device (an int8 plan on a GPU, the
        reference engine on the CPU; on a GPU with ``"fp64"`` possibly native DGEMM, see
        above).  ``"reference"``: float64 BLAS on residues.  ``"int8"``, ``"fp8"``, ``"fp4"``:
        the plan engines.  All engines return the same bits.

    Returns
    -------
    numpy.ndarray, torch.Tensor or another library's array
        The float64 product (complex128 where an operand is complex), of numpy.matmul's shape:
        a numpy array for numpy (or array-like) operands, a tensor on the operands' device where
        either is a torch tensor, else an array of the first operand of another library, on its
        device.

    Raises
    ------
    TypeError
        An operand is not numeric; JAX arrays without JAX's 64-bit types; a traced JAX array
        against a torch tensor or another library's array.
    ValueError
        An unknown ``accuracy`` or ``engine``, a number of bits outside [1, 2098], a scalar
        operand, shapes that do not match or batch dimensions that do not broadcast, operands
        on different devices, another library's array that DLPack cannot read in place or
        that lies on a device other than the CPU and CUDA GPUs, or integers beyond 2^53 in
        magnitude (convert them to float64 first, accepting the rounding).

    Notes
    -----
    NaN and ±Inf inputs give NaN/±Inf exactly where numpy's matmul does, and an exact zero is
    +0.0.  In a complex product each part follows the real rule on its own terms (those of
    the schoolbook product: numpy's elementwise complex arithmetic, torch's complex matmul);
    numpy.matmul through BLAS may make a part NaN where the other part is non-finite
    (:func:`ozaki.operands.emulated` says where).  Past the float64 range, ``"exact"`` rounds to ±inf as numpy does.  The lossy
    accuracies (``"fp64"`` and b bits) round a value of the rows' quantized product: where it
    rounds past ±DBL_MAX but the exact product may be finite (it lies within the rounding of
    the rows, ``ozaki.scaling.rounding_slack``, of a finite value) the result is ±DBL_MAX,
    within the bound of every finite exact product; it is ±inf only where the exact product
    overflows.

    Examples
    --------
    >>> import numpy as np, ozaki
    >>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> ozaki.matmul(a, a).tolist()
    [[7.0, 10.0], [15.0, 22.0]]

    ``"exact"`` keeps what float64 sums lose: here 1, between terms of 1e16.

    >>> x = np.array([1e16, 1.0, -1e16])
    >>> float(ozaki.matmul(x, np.ones(3), accuracy="exact"))
    1.0

    A number of bits trades accuracy for speed: one bit per row keeps only each row's top.

    >>> ozaki.matmul([[3.0, 1.0]], [[1.0], [1.0]], accuracy=1).tolist()
    [[4.0]]

    Torch tensors in, a tensor out, on their device:

    >>> import torch
    >>> t = torch.tensor([[0.5, 0.25]], dtype=torch.float64)
    >>> ozaki.matmul(t, t.T, accuracy="exact").tolist()
    [[0.3125]]
    """
    if not torch.compiler.is_compiling() and shape_sends_to_dgemm(a, b, accuracy, engine):
        # torch's own matmul, differentiable as it is, without the operator's dispatch: its
        # host time would count against DGEMM's.  (A compiled graph holds the operator, whose
        # implementation takes the same shortcut.)
        return torch.matmul(a, b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        # Through the torch operator ozaki::matmul: autograd, torch.func and torch.compile see one
        # product there.  Another library's array joins it, read in place.
        return operator.matmul(*arrays.as_operands(a, b), accuracy=accuracy, engine=engine)
    return arrays.product(a, b, accuracy, engine)


def explain(a, b, *, accuracy="fp64", engine: str = "auto") -> ProductPlan:
    """How ``ozaki.matmul(a, b, accuracy=..., engine=...)`` would compute the product, without
    computing it.

    Reads the inputs' exponents where the shape alone does not decide, as matmul does.

    Parameters
    ----------
    a, b : array_like, torch.Tensor or an array of a library that implements DLPack
        The operands, as :func:`matmul` takes them (JAX arrays not under a transformation:
        the plan reads their values).
    accuracy : {"fp64", "exact"} or int, default "fp64"
        As :func:`matmul`'s.
    engine : {"auto", "reference", "int8", "fp8", "fp4"}, default "auto"
        As :func:`matmul`'s.

    Returns
    -------
    ozaki.planning.ProductPlan
        The path (``"native"`` DGEMM or ``"emulated"``), the engine and its moduli, the
        low-precision GEMMs (``products``), the (fewest, most) bits kept per row of A and per
        column of B, the documented elementwise error bound (``error_bound``) and, on a device
        with a cost profile, the predicted times (``predicted``).

    Raises
    ------
    TypeError, ValueError
        As :func:`matmul`, for the same operands and options.

    Examples
    --------
    >>> import numpy as np, ozaki
    >>> plan = ozaki.explain(np.ones((4, 3)), np.ones((3, 2)), accuracy="exact")
    >>> plan.path, (plan.m, plan.k, plan.n), plan.bits_a
    ('emulated', (4, 3, 2), (1, 1))
    >>> plan.error_bound
    'correctly rounded: |C^ - C| <= u|C| + 2^-1075 (u = 2^-53)'
    """
    return prepare(*arrays.as_operands(a, b), accuracy, engine, early=False).call.plan


