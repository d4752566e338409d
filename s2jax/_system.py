"""Mechanical systems on (S²)ⁿ: everything an integrator needs, derived once, by autodiff.

`AbstractSystem` is what an integrator asks for instead of differentiating the model: the inertia,
∂V/∂q, the generalized forces of 001 (10)–(11), the Legendre map and its inverse, the energy and the
equations of motion. `LagrangianSystem` implements it for the class (2.2) of 002,
L = ½ Σ_ij M_ij q̇_i·q̇_j − V(q), recovering V, ∂V/∂q and the constant M from L by autodiff. Every
method takes a `SystemArgs` (params, the control held over the step, what `prepare` computes once).
Derivation: docs/api/systems.md.
"""

import abc
import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, Float, Lagrangian, Params
from ._force import AbstractForce
from ._geometry import dot, fixed_random_state, project_tangent
from ._inertia import STRUCTURES, Inertia
from ._jit import evaluate_now
from ._structured_solve import chain_factors


class SystemArgs(eqx.Module):
    """The arguments of every `AbstractSystem` method besides the state.

    **Fields:**

    - `params`: the model's parameters, any PyTree.
    - `control`: u, held over the current step and passed to the force; None without controls.
    - `inertia`: the constant inertia matrix M of (2.2) with its structure (an `Inertia`),
      computed once per simulation by `AbstractSystem.prepare`; None where the inertia depends
      on q or has not been prepared (then `LagrangianSystem.inertia` derives it).
    """

    params: Params
    control: object = None
    inertia: Inertia | None = None


class AbstractSystem(eqx.Module):
    """A mechanical system on (S²)ⁿ in the (q, ω) variables of 002 (2.1): q̇_i = ω_i × q_i.

    Implementations declare `has_constant_inertia` (integrators of 002 need a constant M) and
    hold their non-conservative force (`force`, an `AbstractForce` or None), which
    `generalized_force` adds to −∂V/∂q.
    """

    has_constant_inertia: eqx.AbstractClassVar[bool]
    force: eqx.AbstractVar[AbstractForce | None]

    @property
    def force_depends_on_velocity(self) -> bool:
        """Whether the force depends on ω (which makes the variational steps implicit in ω_{k+1}
        and rules out the reversible adjoint)."""
        return self.force is not None and self.force.depends_on_velocity

    @abc.abstractmethod
    def prepare(self, q: Float[Array, "n 3"], params: Params) -> SystemArgs:
        """The `SystemArgs` of a simulation from q: what can be computed once is computed here."""

    @abc.abstractmethod
    def inertia(self, q: Float[Array, "n 3"], args: SystemArgs) -> Float[Array, "n n"]:
        """The inertia matrix M (m_ij(q) for a configuration-dependent inertia)."""

    @abc.abstractmethod
    def potential_gradient(self, q: Float[Array, "n 3"], args: SystemArgs) -> Float[Array, "n 3"]:
        """∂V/∂q_i in ℝ³ (the ambient gradient; only its tangential part acts)."""

    def generalized_force(
        self,
        t: Float[Array, ""],
        q: Float[Array, "n 3"],
        omega: Float[Array, "n 3"],
        args: SystemArgs,
        conservative: Float[Array, "n 3"] | None = None,
    ) -> Float[Array, "n 3"]:
        """The total generalized force −∂V/∂q + f(t, q, ω, u) of 001 (10), in ℝ³ per body.

        `conservative`, if given, is −∂V/∂q at q, already evaluated (integrators reuse it
        between steps). Without a non-conservative force it is returned as it is, so a step
        of an unforced system is bitwise the same whether or not the force enters it.
        """
        if conservative is None:
            conservative = -self.potential_gradient(q, args)
        if self.force is None:
            return conservative
        return conservative + self.force(t, q, omega, args.control, args.params)

    @abc.abstractmethod
    def momentum(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], args: SystemArgs):
        """The Legendre map (2.12): p_i, the projection of ∂L/∂q̇_i onto T_{q_i} S²."""

    @abc.abstractmethod
    def angular_velocity(self, q: Float[Array, "n 3"], p: Float[Array, "n 3"], args: SystemArgs):
        """The inverse Legendre map: ω with ω_i ⊥ q_i and momentum(q, ω) = p."""

    @abc.abstractmethod
    def energy(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], args: SystemArgs):
        """E = Σ_i q̇_i·∂L/∂q̇_i − L, the total energy."""

    @abc.abstractmethod
    def angular_acceleration(
        self, t: Float[Array, ""], q: Float[Array, "n 3"], omega: Float[Array, "n 3"], args: SystemArgs
    ) -> Float[Array, "n 3"]:
        """ω̇ of the continuous equations of motion, with the generalized forces."""

    def velocity(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
        """q̇_i = ω_i × q_i, 002 (2.1) / (2.10)."""
        return jnp.cross(omega, q)

    def vector_field(self, t, q, omega, args: SystemArgs):
        """(q̇, ω̇), the continuous equations of motion in (q, ω) form (002 (2.9)–(2.10))."""
        return self.velocity(q, omega), self.angular_acceleration(t, q, omega, args)


class LagrangianSystem(AbstractSystem):
    """The system of a Lagrangian of the form (2.2) of 002, with optional generalized forces.

    **Arguments:**

    - `lagrangian`: a pure function `L(q, qdot, params) -> scalar`, q and q̇ of shape (n, 3).
    - `force`: an `AbstractForce` (or None): the non-conservative generalized forces of
      001 (10), added to −∂V/∂q wherever it enters.
    - `inertia_structure`: what is known of M: "dense" (any M), "chain" (M_ij =
      c_{max(i,j)} l_i l_j, `s2jax._structured_solve`) or "diagonal" (then `Rattle` solves for
      its multipliers in closed form, one quadratic per body). None (the default): not declared,
      so the plan recognises it from a concrete M (`with_structure`) or probes it where the params
      are traced (`with_probed_structure`). A declared structure is checked on M: eagerly with
      concrete params (`with_structure` raises) and in the graph when a simulation starts
      (`RESULTS.inertia_not_chain`, `RESULTS.inertia_not_diagonal`). Models whose M has a
      structure for every params declare it (e.g. `models.chain_pendulum.system()`).
    """

    lagrangian: Lagrangian
    force: AbstractForce | None = None
    inertia_structure: str | None = eqx.field(default=None, static=True)

    has_constant_inertia: ClassVar[bool] = True

    def __check_init__(self):
        if self.inertia_structure is not None and self.inertia_structure not in STRUCTURES:
            raise ValueError(
                f'inertia_structure must be "dense", "chain", "diagonal" or None, got {self.inertia_structure!r}'
            )

    def prepare(self, q, params):
        return SystemArgs(params, inertia=self.structured_inertia(q, SystemArgs(params)))

    def with_structure(self, inertia) -> "LagrangianSystem":
        """This system with the structure of a concrete M (numpy array): the declared one, checked
        on M (a `ValueError` if M does not have it), or the one recognised from M."""
        recognised = Inertia.recognise(np.asarray(inertia))
        declared = self.inertia_structure
        if declared is None:
            return dataclasses.replace(self, inertia_structure=recognised)
        if declared == "chain" and recognised == "dense" or declared == "diagonal" and recognised != "diagonal":
            raise ValueError(
                f'inertia_structure="{declared}" is declared, but M at these params is {recognised}: '
                f"M = {np.asarray(inertia).tolist()}. Declare the structure M has, or leave it out (None)."
            )
        return self

    def with_probed_structure(self, n: int, params: Params, dtype) -> "LagrangianSystem":
        """This system with `inertia_structure` recognised where the params are traced.

        M of (2.2) is then unknown before compiling, but whether it is a chain's is a property
        of L: M is computed at two random draws of the traced float leaves of `params` (each
        uniform in [0.5, 1.5], same shape; concrete leaves kept), and the structure is "chain" if
        both are. `simulate` then checks the actual M in the graph (`RESULTS.inertia_not_chain`),
        so a wrong guess is reported, never used. Where L cannot be evaluated at such values,
        "dense". A declared structure is kept (not probed).
        """
        if self.inertia_structure is not None:
            return self
        lagrangian_only = dataclasses.replace(self, force=None)  # M is the Lagrangian's alone
        leaves, treedef = jax.tree_util.tree_flatten(params)
        for seed in (1, 2):  # numpy's generator: no random-number program to compile
            rng = np.random.default_rng(seed)
            with jax.ensure_compile_time_eval():  # constants, even inside a user's jit
                draws = [
                    jnp.asarray(rng.uniform(0.5, 1.5, leaf.shape), leaf.dtype)
                    if isinstance(leaf, jax.core.Tracer) and jnp.issubdtype(leaf.dtype, jnp.floating) else leaf
                    for leaf in leaves
                ]
                q = jnp.asarray(fixed_random_state(n, seed)[0], dtype)
            probe = jax.tree_util.tree_unflatten(treedef, draws)
            try:
                inertia = np.asarray(evaluate_now(_probed_inertia, lagrangian_only, q, probe))
            except Exception:  # noqa: BLE001 -- L may reject made-up values: then no guess
                return dataclasses.replace(self, inertia_structure="dense")
            if chain_factors(inertia) is None:
                return dataclasses.replace(self, inertia_structure="dense")
        return dataclasses.replace(self, inertia_structure="chain")

    def structured_inertia(self, q: Float[Array, "n 3"], args: SystemArgs) -> Inertia:
        """M with its structure: `args.inertia` once prepared, else derived at q."""
        if args.inertia is not None:
            return args.inertia
        return Inertia.of(self.inertia(q, args), self.inertia_structure or "dense")

    def solve_operator(
        self, q: Float[Array, "n 3"], rhs: Float[Array, "n 3"], args: SystemArgs, factor=None
    ) -> Float[Array, "n 3"]:
        """ω with A(q) ω = rhs, A the operator of (2.11)/(3.13) (`Inertia.solve`; `factor`: its
        `Inertia.gram_factor` at q, if already computed)."""
        return self.structured_inertia(q, args).solve(q, rhs, factor)

    def potential(self, q: Float[Array, "n 3"], args: SystemArgs) -> Float[Array, ""]:
        """V(q) = −L(q, 0)."""
        return -self.lagrangian(q, jnp.zeros_like(q), args.params)

    def potential_gradient(self, q, args):
        return jax.grad(self.potential)(q, args)

    def inertia(self, q, args):
        """M of (2.2): M_ij = ∂²L/∂q̇_i^x ∂q̇_j^x at q̇ = 0 (`args.inertia` once prepared).

        Only the x-components are differentiated (n forward-mode tangents, not 3n), which is
        all of the Hessian when it has the form M ⊗ I₃; `check_lagrangian_form` verifies that
        form, and that M is constant and positive definite, before a simulation compiles.
        """
        if args.inertia is not None:
            return args.inertia.matrix
        unit_x = jnp.zeros(3, q.dtype).at[0].set(1.0)

        def momentum_x(speeds):
            qdot = speeds[:, None] * unit_x[None, :]
            return jax.grad(self.lagrangian, argnums=1)(q, qdot, args.params)[:, 0]

        return jax.jacfwd(momentum_x)(jnp.zeros(q.shape[0], q.dtype))

    def ambient_momentum(self, q, omega, args):
        """∂L/∂q̇_i at q̇ = ω × q, in ℝ³."""
        return jax.grad(self.lagrangian, argnums=1)(q, self.velocity(q, omega), args.params)

    def momentum(self, q, omega, args):
        return project_tangent(q, self.ambient_momentum(q, omega, args))

    def angular_velocity(self, q, p, args):
        """ω from p by A(q) ω = q × p, A the operator of (2.11)/(3.13).

        Row i of A ω is q_i × Σ_j M_ij (ω_j × q_j) for ω_i ⊥ q_i, so this is q × (Legendre map).
        """
        return self.solve_operator(q, jnp.cross(q, p), args)

    def energy(self, q, omega, args):
        qdot = self.velocity(q, omega)
        value, momentum = jax.value_and_grad(self.lagrangian, argnums=1)(q, qdot, args.params)
        return jnp.sum(qdot * momentum) - value

    def angular_acceleration(self, t, q, omega, args):
        """ω̇ from (2.11) with the generalized force F = −∂V/∂q + f, by block elimination.

        The right-hand side of (2.11) is Σ_{j≠i} M_ij |ω_j|² q_i × q_j + q_i × F_i (001 (19) for
        a constant M); the j = i term of the sum is q_i × q_i = 0, so it is written as
        q_i × (M (|ω|² q) + F)_i.
        """
        inertia = self.structured_inertia(q, args)
        speed2 = dot(omega, omega)[:, None]
        force = self.generalized_force(t, q, omega, args)
        rhs = jnp.cross(q, inertia.times(speed2 * q) + force)
        return inertia.solve(q, rhs)


@eqx.filter_jit
def _probed_inertia(system: LagrangianSystem, q, params) -> Float[Array, "n n"]:
    """M of (2.2) at q and made-up params (`LagrangianSystem.with_probed_structure`), as one
    compiled program (`evaluate_now`)."""
    return system.inertia(q, SystemArgs(params))
