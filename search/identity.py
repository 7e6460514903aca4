"""The symbolic identity behind an encoding, derived and checked with sympy.

For limb symbols d_i, e_j the encoding claims
    sum_t lam_t (f_t . d)(g_t . e) == (u . d)(v . e)        (or == mod m).
Both sides are polynomials in d, e; the claim holds for all limb vectors exactly when
every coefficient of their difference is 0 (or divisible by m).
"""

from __future__ import annotations

import sympy

__all__ = ["identity_text"]


def identity_text(weights_a, weights_b, planes, modulus: int | None) -> str:
    """The identity as text, after checking it symbolically.

    ``planes`` holds (f, g, coefficient) triples.  ``ValueError`` names the first
    monomial whose coefficient breaks the identity."""
    d = sympy.symbols(f"d0:{len(weights_a)}", integer=True)
    e = sympy.symbols(f"e0:{len(weights_b)}", integer=True)

    def dot(row, sym):
        return sum((c * s for c, s in zip(row, sym)), sympy.Integer(0))

    lhs = sum((lam * dot(f, d) * dot(g, e) for f, g, lam in planes), sympy.Integer(0))
    rhs = dot(weights_a, d) * dot(weights_b, e)
    residual = sympy.Poly(sympy.expand(lhs - rhs), *d, *e)
    for monomial, coefficient in residual.terms():
        if coefficient != 0 and (modulus is None or coefficient % modulus != 0):
            term = sympy.Mul(*(s**k for s, k in zip((*d, *e), monomial)))
            where = "" if modulus is None else f" mod {modulus}"
            raise ValueError(f"identity fails: coefficient of {term} is {coefficient}, want 0{where}")
    relation = "==" if modulus is None else f"(mod {modulus}) =="
    terms = " + ".join(f"({lam})*({dot(f, d)})*({dot(g, e)})" for f, g, lam in planes)
    return f"{terms} {relation} ({dot(weights_a, d)})*({dot(weights_b, e)})"
