"""`AutoIntegrator`: what `integrator=None` means, for every system kind and inertia structure."""

import equinox as eqx

from .._block_elimination import MAX_UNROLLED_BODIES
from .._general_system import GeneralLagrangianSystem
from .._hamiltonian import HamiltonianSystem
from .._system import AbstractSystem, LagrangianSystem
from .base import AbstractIntegrator
from .constrained import MIN_CHAIN_RATTLE_BODIES, Rattle
from .general_variational import GeneralVariationalIntegrator
from .hamiltonian import HamiltonianRattle
from .variational import ExplicitVariationalIntegrator, VariationalIntegrator

# The integrators `select` returns: immutable, so one instance each serves every call.
_EXPLICIT, _IMPLICIT = ExplicitVariationalIntegrator(), VariationalIntegrator()
_GENERAL, _HAMILTONIAN = GeneralVariationalIntegrator(), HamiltonianRattle()
_MULTIPLIERS = Rattle()


class AutoIntegrator(eqx.Module):
    """The integrator chosen from the system and the structure of its inertia (after lineax's
    `AutoLinearSolver`): `integrator=None` means `AutoIntegrator()` in every entry point.

    - a `LagrangianSystem` (the form (2.2) of 002): the explicit (3.17)–(3.18),
      `ExplicitVariationalIntegrator`, when M is known to be diagonal (the same map as
      (3.10)–(3.13) to round-off, without Newton's method); `Rattle` when M is known to be a
      chain's (002 §4.2) of at least `MIN_CHAIN_RATTLE_BODIES` (5) links and no force depends on
      ω: the same map again, (3.10)–(3.13) computed by n multipliers in O(n) an iteration
      instead of 2n tangent coordinates (its docstring; 2.4e-14 apart after 300 steps of a
      12-link chain, `tests/test_hamel_and_constrained.py`), 1.45–3.2× faster a step at 8–256
      links and 2.3–2.6× in a batch of 16-link chains (docs/performance.md, "The default on
      chains"); otherwise the implicit (3.10)–(3.13), `VariationalIntegrator`, which takes any M;
    - a `GeneralLagrangianSystem` (any regular L of 001): `GeneralVariationalIntegrator`;
    - a `HamiltonianSystem` (001 (21)): `HamiltonianRattle`.

    **Arguments:**

    - `linearised`: the run is differentiated step by step (trajectory optimisation: iLQR
      linearises every step in every iteration; `s2jax.control.Problem` and `s2jax.fit.fit`
      plan with it). Then a `LagrangianSystem` whose M is not known to be diagonal, of at most
      `MAX_UNROLLED_BODIES` (8) bodies and without a force that depends on ω, runs `Rattle`: the map of
      (3.10)–(3.13) computed by n multipliers instead of 2n tangent coordinates (`Rattle`'s
      docstring; the same trajectory to round-off), whose derivatives compile 1.6–4.2× and run
      1.7–2.3× faster in iLQR (measured: docs/api/control.md, "Which integrator"). Default
      False: `simulate` keeps 002's integrator.

    `AutoIntegrator` never steps: the plan replaces it by `select`'s choice before compiling, and
    `Solution.integrator` names that choice.
    """

    linearised: bool = eqx.field(static=True, default=False)

    def select(
        self, system: AbstractSystem, structure: str | None = None, num_bodies: int | None = None
    ) -> AbstractIntegrator:
        """The integrator for `system` of `num_bodies` bodies whose inertia has `structure`.

        **Arguments:**

        - `system`: the system to integrate.
        - `structure`: "diagonal", "chain" or "dense" where M of (2.2) is known before compiling
          (for traced params `plan` passes "chain" for a chain declared or probed from L, else
          None); a known diagonal M or chain changes the choice.
        - `num_bodies`: n, where known (`Rattle` is chosen by it; None: not `Rattle`).

        **Returns:** an `AbstractIntegrator` whose `system_type` admits `system`.
        """
        if isinstance(system, LagrangianSystem):
            if structure == "diagonal":
                return _EXPLICIT
            if system.force_depends_on_velocity or num_bodies is None:
                return _IMPLICIT
            long_chain = structure == "chain" and num_bodies >= MIN_CHAIN_RATTLE_BODIES
            if long_chain or (self.linearised and num_bodies <= MAX_UNROLLED_BODIES):
                return _MULTIPLIERS
            return _IMPLICIT
        if isinstance(system, GeneralLagrangianSystem):
            return _GENERAL
        if isinstance(system, HamiltonianSystem):
            return _HAMILTONIAN
        raise ValueError(
            f"AutoIntegrator has no default for a {type(system).__name__}; pass integrator=..., e.g. "
            "RungeKutta4(), which needs only the system's equations of motion"
        )
