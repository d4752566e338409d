"""Shape aliases used across s2jax, in the jaxtyping notation of diffrax."""

from collections.abc import Callable
from typing import Any

from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

Configuration = Float[Array, "n 3"]
"""q = (q_1, …, q_n) ∈ (S²)ⁿ, one unit vector per row."""

AngularVelocity = Float[Array, "n 3"]
"""ω = (ω_1, …, ω_n) with ω_i ⊥ q_i, so that q̇_i = ω_i × q_i (002 (2.1))."""

Params = PyTree[Any]
"""The model's parameters: any PyTree of arrays and Python scalars."""

Lagrangian = Callable[[Configuration, Float[Array, "n 3"], Params], Float[Array, ""]]
"""A pure function L(q, q̇, params) -> scalar."""

__all__ = [
    "Array",
    "ArrayLike",
    "Bool",
    "AngularVelocity",
    "Configuration",
    "Float",
    "Int",
    "Lagrangian",
    "Params",
    "PyTree",
]
