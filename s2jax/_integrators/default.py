"""The integrator `simulate` uses when none is given."""

import numpy as np

from .._structured_solve import is_diagonal
from .base import AbstractIntegrator
from .variational import ExplicitVariationalIntegrator, VariationalIntegrator


def default_integrator(inertia) -> AbstractIntegrator:
    """The variational integrator of 002 that suits the inertia matrix M.

    A diagonal M decouples the Cayley equation (3.16): the explicit (3.17)–(3.18) is then the
    same map as (3.10)–(3.13) to round-off, without Newton's method or a 3n × 3n solve (for
    642 Lennard-Jones molecules, 002 Example 6, about a thousand times cheaper per step).
    Otherwise the implicit (3.10)–(3.13).

    **Arguments:**

    - `inertia`: M as a concrete (n, n) array, or None when it is not known before compiling
      (traced parameters); then the implicit integrator, which takes any M.

    **Returns:** an `ExplicitVariationalIntegrator` or a `VariationalIntegrator`.
    """
    if inertia is not None and is_diagonal(np.asarray(inertia)):
        return ExplicitVariationalIntegrator()
    return VariationalIntegrator()
