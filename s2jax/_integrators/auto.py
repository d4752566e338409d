"""`AutoIntegrator`: what `integrator=None` means, for every system kind and inertia structure."""

import equinox as eqx

from .._general_system import GeneralLagrangianSystem
from .._hamiltonian import HamiltonianSystem
from .._system import AbstractSystem, LagrangianSystem
from .base import AbstractIntegrator
from .general_variational import GeneralVariationalIntegrator
from .hamiltonian import HamiltonianRattle
from .variational import ExplicitVariationalIntegrator, VariationalIntegrator

# The integrators `select` returns: immutable, so one instance each serves every call.
_EXPLICIT, _IMPLICIT = ExplicitVariationalIntegrator(), VariationalIntegrator()
_GENERAL, _HAMILTONIAN = GeneralVariationalIntegrator(), HamiltonianRattle()


class AutoIntegrator(eqx.Module):
    """The integrator chosen from the system and the structure of its inertia (after lineax's
    `AutoLinearSolver`): `integrator=None` means `AutoIntegrator()` in every entry point.

    - a `LagrangianSystem` (the form (2.2) of 002): the explicit (3.17)–(3.18),
      `ExplicitVariationalIntegrator`, when M is known to be diagonal (the same map as
      (3.10)–(3.13) to round-off, without Newton's method); otherwise the implicit
      (3.10)–(3.13), `VariationalIntegrator`, which takes any M;
    - a `GeneralLagrangianSystem` (any regular L of 001): `GeneralVariationalIntegrator`;
    - a `HamiltonianSystem` (001 (21)): `HamiltonianRattle`.

    `AutoIntegrator` never steps: the plan replaces it by `select`'s choice before compiling, and
    `Solution.integrator` names that choice.
    """

    def select(self, system: AbstractSystem, structure: str | None = None) -> AbstractIntegrator:
        """The integrator for `system` whose inertia has `structure`.

        **Arguments:**

        - `system`: the system to integrate.
        - `structure`: "diagonal", "chain" or "dense" where M of (2.2) is known before compiling,
          None where it is not (traced params); only a known diagonal M changes the choice.

        **Returns:** an `AbstractIntegrator` whose `system_type` admits `system`.
        """
        if isinstance(system, LagrangianSystem):
            return _EXPLICIT if structure == "diagonal" else _IMPLICIT
        if isinstance(system, GeneralLagrangianSystem):
            return _GENERAL
        if isinstance(system, HamiltonianSystem):
            return _HAMILTONIAN
        raise ValueError(
            f"AutoIntegrator has no default for a {type(system).__name__}; pass integrator=..., e.g. "
            "RungeKutta4(), which needs only the system's equations of motion"
        )
