"""What a search is asked for (:class:`Spec`) and where it looks (:class:`Family`).

A spec is the problem: input ranges, digit set, modulus.  A family is the finite space
the engine searches exhaustively: products, limbs per side, plane-row coefficient and
weight bounds per side, and a bound on reconstruction coefficients.  Every optimality
claim the engine records is "within this family", so the family is written into the
JSON beside the result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernels.digits import DIGIT_SETS, digit_set

__all__ = ["Family", "ProductFamily", "Spec", "default_family", "minimal_limbs", "product_family"]


def _check_int(value, what: str, low: int) -> None:
    if type(value) is not int:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{what} must be at least {low}, got {value}")


@dataclass(frozen=True)
class Spec:
    """Encode a*b for a in [a_min, a_max], b in [b_min, b_max] with plane values in ``digits``;
    with ``modulus`` the identity only has to hold modulo it (residue encodings)."""

    digits: str
    a_min: int
    a_max: int
    b_min: int
    b_max: int
    modulus: int | None = None

    def __post_init__(self) -> None:
        if self.digits not in DIGIT_SETS:
            raise ValueError(f"unknown digit set {self.digits!r}; known digit sets: {', '.join(sorted(DIGIT_SETS))}")
        for side in ("a", "b"):
            lo, hi = self.side_range(side)
            for name, value in ((f"{side}_min", lo), (f"{side}_max", hi)):
                if type(value) is not int:
                    raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
            if hi < lo:
                raise ValueError(f"bad range for {side}: max {hi} is below min {lo}")
        if self.modulus is not None:
            _check_int(self.modulus, "modulus", 2)
            for side in ("a", "b"):
                lo, hi = self.side_range(side)
                if hi - lo + 1 < self.modulus:
                    raise ValueError(
                        f"range of {side} spans {hi - lo + 1} integers, fewer than the modulus {self.modulus}: "
                        f"a residue encoding needs every residue (use the balanced range)"
                    )

    @classmethod
    def residue(cls, modulus: int, digits: str) -> Spec:
        """Residues mod ``modulus`` on both sides, balanced: [-(m//2), m - 1 - m//2]."""
        _check_int(modulus, "modulus", 2)
        lo, hi = -(modulus // 2), modulus - 1 - modulus // 2
        return cls(digits, lo, hi, lo, hi, modulus)

    @property
    def digit_values(self) -> frozenset[int]:
        return digit_set(self.digits)

    @property
    def symmetric(self) -> bool:
        """S = -S: then d(-x) = -d(x), and only x >= 0 (or residues <= m/2) need a search."""
        s = self.digit_values
        return all(-v in s for v in s)

    def side_range(self, side: str) -> tuple[int, int]:
        return getattr(self, f"{side}_min"), getattr(self, f"{side}_max")

    def count(self, side: str) -> int:
        """How many inputs (residues) one side must encode."""
        lo, hi = self.side_range(side)
        return self.modulus if self.modulus is not None else hi - lo + 1


@dataclass(frozen=True)
class Family:
    """The searched space.  ``products`` is an upper bound: fewer is allowed and preferred.

    Side A has ``limbs_a`` limbs with weights in [0, weight_bound_a] (a limb's sign can
    be flipped with its plane column; with a modulus, weights are residues in [0, m//2])
    and plane rows with entries in [-coefficient_bound_a, coefficient_bound_a] that
    span its limbs (a limb no plane sees is useless: drop it and search fewer limbs);
    side B likewise.  Reconstruction coefficients lie in [-lambda_bound, lambda_bound]
    (with a modulus: all residues).  Limbs are not bounded: plane rows that span the
    limbs determine them from the stored digits.  With a modulus, side A's first weight
    is 1: that is no restriction when some A weight is a unit mod m (always for prime
    powers), and the certificate says so."""

    products: int
    limbs_a: int
    limbs_b: int
    coefficient_bound_a: int
    coefficient_bound_b: int
    weight_bound_a: int
    weight_bound_b: int
    lambda_bound: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            _check_int(value, name, 1)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"at most {self.products} products; {self.limbs_a} A-limbs with weights in [0, {self.weight_bound_a}] "
            f"and plane rows in [-{self.coefficient_bound_a}, {self.coefficient_bound_a}]; {self.limbs_b} B-limbs "
            f"with weights in [0, {self.weight_bound_b}] and plane rows in [-{self.coefficient_bound_b}, "
            f"{self.coefficient_bound_b}]; plane rows spanning the limbs; |coefficient| <= {self.lambda_bound}"
        )


@dataclass(frozen=True)
class ProductFamily(Family):
    """The space search.product_encodings searches for exact products, in plane coordinates: each
    side's limbs are the values of n identity planes (digits), its other plane rows have
    entries in [-coefficient_bound, coefficient_bound], its weights lie in
    [-weight_bound, weight_bound]; reconstruction coefficients in [-lambda_bound,
    lambda_bound].  Any encoding whose plane rows contain a unimodular basis has this
    form after a change of limb coordinates (with its own bounds).  The bounds are
    :class:`Family`'s fields, read in these coordinates."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if max(self.limbs_a, self.limbs_b) > 3:
            raise ValueError(f"the product search handles at most 3 limbs per side, got {self.limbs_a}, {self.limbs_b}")

    def limbs(self, side: str) -> int:
        return getattr(self, f"limbs_{side}")

    def coefficient_bound(self, side: str) -> int:
        return getattr(self, f"coefficient_bound_{side}")

    def weight_bound(self, side: str) -> int:
        return getattr(self, f"weight_bound_{side}")

    def describe(self) -> str:
        return (
            f"at most {self.products} products; {self.limbs_a} A-limbs and {self.limbs_b} B-limbs that are the values "
            f"of identity planes (plane coordinates); other plane rows with entries in [-{self.coefficient_bound_a}, "
            f"{self.coefficient_bound_a}] (A) and [-{self.coefficient_bound_b}, {self.coefficient_bound_b}] (B); "
            f"weights in [-{self.weight_bound_a}, {self.weight_bound_a}] (A) and [-{self.weight_bound_b}, "
            f"{self.weight_bound_b}] (B); |coefficient| <= {self.lambda_bound}"
        )


def product_family(spec: Spec, products: int, *, limbs_a: int | None = None, limbs_b: int | None = None,
                   coefficient_bound_a: int = 1, coefficient_bound_b: int = 1, weight_bound_a: int | None = None,
                   weight_bound_b: int | None = None) -> ProductFamily:
    """Sized from the spec like :func:`default_family`: minimal limbs, weights up to half
    the largest input magnitude, coefficients up to four times the weight bounds' product."""
    base = default_family(spec, products, limbs_a=limbs_a, limbs_b=limbs_b)
    wa = weight_bound_a if weight_bound_a is not None else base.weight_bound_a
    wb = weight_bound_b if weight_bound_b is not None else base.weight_bound_b
    return ProductFamily(products, base.limbs_a, base.limbs_b, coefficient_bound_a, coefficient_bound_b, wa, wb,
                         4 * wa * wb)


def minimal_limbs(count: int, digits: str) -> int:
    """Fewest limbs n with |S|^n >= count: with plane rows spanning the limbs, the plane
    values determine the limbs, so distinct inputs need distinct digit vectors."""
    size = len(digit_set(digits))
    n = 1
    while size**n < count:
        n += 1
    return n


def default_family(spec: Spec, products: int, *, limbs_a: int | None = None, limbs_b: int | None = None,
                   coefficient_bound_a: int = 1, coefficient_bound_b: int = 1) -> Family:
    """A family sized from the spec: limbs from :func:`minimal_limbs`; weights up to half
    the largest input magnitude (a modulus m bounds them by m // 2); coefficients up to
    four times the product of the weight bounds (all residues for a modulus)."""
    limbs = {
        side: given if given is not None else minimal_limbs(spec.count(side), spec.digits)
        for side, given in (("a", limbs_a), ("b", limbs_b))
    }
    if spec.modulus is not None:
        weights = {side: max(1, spec.modulus // 2) for side in "ab"}
        lam = spec.modulus
    else:
        weights = {side: max(1, max(abs(x) for x in spec.side_range(side)) // 2) for side in "ab"}
        lam = 4 * weights["a"] * weights["b"]
    return Family(products, limbs["a"], limbs["b"], coefficient_bound_a, coefficient_bound_b,
                  weights["a"], weights["b"], lam)
