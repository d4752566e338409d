"""The integrator contract, one test over the registry (`s2jax._integrators.REGISTRY`).

Every fixed-step integrator, on a system of the kind it declares (`system_type`):
- its measured order is its declared `order` (against a tight DOP853 solve of the same system);
- `is_symmetric` ⇒ a step of −h undoes a step of h to the Newton tolerance;
- |q_i| = 1 without renormalisation (all but the Runge–Kutta baselines, which do not keep it);
- a zero force gives bitwise the unforced step;
- `lazy_step` then `velocity` is `step`;
- it runs under `jax.jit` and `jax.vmap` as it runs eagerly, and its gradient (each admissible
  adjoint) matches central differences.
A new integrator in the registry is checked by all of this with no line added here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax as s2
from s2jax._integrators import REGISTRY, AbstractIntegrator, AbstractRungeKutta
from s2jax._plan import plan
from s2jax._system import LagrangianSystem, SystemArgs
from s2jax.models import (
    double_spherical_pendulum as dsp,
    rotating_spherical_pendulum as rotating,
    spherical_pendulum as single,
)

FIXED_STEP = [i for i in REGISTRY if isinstance(i, AbstractIntegrator)]


def _name(integrator):
    base = getattr(integrator, "integrator", None)
    return type(integrator).__name__ + (f"-{type(base).__name__}-{integrator.order}" if base is not None else "")


def _rotating_hamiltonian(q, p, params):
    m, r, g, rate = params["m"], params["r"], params["g"], params["Omega"]
    frame = jnp.cross(jnp.array([0.0, 0.0, 1.0]), q)
    return jnp.sum(p**2) / (2 * m * r**2) - rate * jnp.sum(p * frame) - m * g * r * q[0, 2]


def _case(integrator, cheapest=False):
    """(model, params, q0, ω0, name of a float param to differentiate) for the integrator's kind;
    with `cheapest`, one body wherever the kind allows it (a smaller program to compile)."""
    kind = integrator.system_type
    if kind is s2.HamiltonianSystem:
        model, params, state, key = s2.HamiltonianSystem(_rotating_hamiltonian), rotating.paper_params(), \
            rotating.paper_state(), "Omega"
    elif kind is s2.GeneralLagrangianSystem:
        model, params, state, key = rotating.lagrangian, rotating.paper_params(), rotating.paper_state(), "Omega"
    elif integrator.requires_diagonal_inertia or cheapest:
        model, params, state, key = single.lagrangian, single.paper_params(), single.paper_state(), "g"
    else:
        assert issubclass(LagrangianSystem, kind)
        model, params, state, key = dsp.lagrangian, dsp.paper_params(), dsp.paper_state(), "g"
    params = jax.tree.map(jnp.asarray, params)
    q0, omega0 = (jnp.asarray(x) for x in state)
    return model, params, q0, omega0, key


def _planned(integrator, force=None):
    model, params, q0, omega0, _ = _case(integrator)
    if isinstance(model, s2.AbstractSystem) and force is not None:
        model = type(model)(model.hamiltonian, force)
        force = None
    the_plan = plan(model, q0, omega0, params, integrator=integrator, force=force)
    assert type(the_plan.integrator) is type(integrator)
    return the_plan, params, q0, omega0


def _one_step(the_plan, params, y, dt, lazy=False):
    system, integrator = the_plan.system, the_plan.integrator
    args = system.prepare(y[0], params)
    state = integrator.init(system, jnp.zeros(()), y, args)
    take = integrator.lazy_step if lazy else integrator.step
    y1, state1, result = take(system, jnp.zeros(()), jnp.asarray(dt), y, args, state)
    assert result == s2.RESULTS.successful
    return y1, state1, args


@pytest.mark.parametrize("integrator", FIXED_STEP, ids=_name)
def test_step_contract(integrator):
    the_plan, params, q0, omega0 = _planned(integrator)
    y0 = (q0, omega0)
    y1, state1, args = _one_step(the_plan, params, y0, 0.05)

    # |q_i| = 1 by construction, no renormalisation (the Runge–Kutta baselines do not keep it)
    if not isinstance(integrator, AbstractRungeKutta) or integrator.reproject:
        np.testing.assert_allclose(jnp.linalg.norm(y1[0], axis=-1), 1.0, rtol=0, atol=4e-16)

    # symmetric ⇒ a step of −h from y1 returns to y0
    if integrator.is_symmetric:
        back, _, _ = _one_step(the_plan, params, y1, -0.05)
        np.testing.assert_allclose(back[0], q0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(back[1], omega0, rtol=0, atol=1e-11)

    # lazy_step then velocity is step
    lazy, lazy_state, _ = _one_step(the_plan, params, y0, 0.05, lazy=True)
    omega1 = the_plan.integrator.velocity(the_plan.system, lazy, args, lazy_state)
    np.testing.assert_array_equal(lazy[0], y1[0])
    np.testing.assert_array_equal(omega1, y1[1])

    # a zero force is bitwise no force
    zero = s2.Force(lambda t, q, omega, u, p: jnp.zeros_like(q), depends_on_velocity=False)
    forced_plan, *_ = _planned(integrator, force=zero)
    forced, _, _ = _one_step(forced_plan, params, y0, 0.05)
    np.testing.assert_array_equal(forced[0], y1[0])
    np.testing.assert_array_equal(forced[1], y1[1])


@pytest.mark.slow
@pytest.mark.parametrize("integrator", FIXED_STEP, ids=_name)
def test_measured_order_is_the_declared_order(integrator):
    """Error at T = 1 s against DOP853 at 1e-13 for four halvings of h: the log–log slope of the
    last halving is the declared order (the largest h of a high-order composition is not yet in
    the asymptotic range), and no halving is shallower."""
    the_plan, params, q0, omega0 = _planned(integrator)
    system, horizon = the_plan.system, 1.0
    args = system.prepare(q0, params)
    field = jax.jit(lambda y: jnp.concatenate([jnp.ravel(x) for x in system.vector_field(
        0.0, y[:y.size // 2].reshape(q0.shape), y[y.size // 2:].reshape(q0.shape), args)]))
    reference = solve_ivp(lambda t, y: np.asarray(field(jnp.asarray(y))), (0.0, horizon),
                          np.concatenate([np.ravel(q0), np.ravel(omega0)]), method="DOP853",
                          rtol=1e-13, atol=1e-15).y[:q0.size, -1].reshape(q0.shape)
    first = {1: 32, 2: 16, 3: 8, 4: 8, 6: 4}[integrator.order]
    counts = first * 2 ** np.arange(4)
    errors = [
        float(jnp.max(jnp.abs(s2.simulate(system, q0, omega0, params, dt=horizon / int(count),
                                          num_steps=int(count), integrator=the_plan.integrator).q[-1] - reference)))
        for count in counts
    ]
    assert errors[-1] > 1e-11, errors  # above the reference's round-off
    slopes = -np.diff(np.log(errors)) / np.diff(np.log(counts))
    assert abs(slopes[-1] - integrator.order) < 0.4, (errors, slopes)
    assert np.all(slopes > integrator.order - 0.4), (errors, slopes)


@pytest.mark.slow
@pytest.mark.parametrize("integrator", FIXED_STEP, ids=_name)
def test_jit_vmap_grad(integrator):
    """jit(vmap) gives the eager runs; each admissible adjoint's gradient matches differences."""
    # One body wherever the kind allows: the reverse passes of the order-4 methods (RKMK4, the
    # compositions) compile for a minute or more on two bodies. The dense path's gradients:
    # tests/test_gradients.py::test_dense_path_forward_and_reverse_mode_agree_with_differences.
    model, params, q0, omega0, key = _case(integrator, cheapest=True)
    options = dict(dt=0.02, num_steps=6, integrator=integrator)

    def final(p, q=q0, omega=omega0, adjoint=None):
        sol = s2.simulate(model, q, omega, p, adjoint=adjoint, **options)
        return jnp.sum(sol.q[-1] * jnp.array([[1.0, 2.0, 3.0]])) + jnp.sum(sol.omega[-1])

    # jit and vmap in one compiled program, against the members run eagerly one at a time
    omegas = jnp.stack([omega0, -omega0])
    batched = jax.jit(jax.vmap(lambda omega: final(params, omega=omega)))(omegas)
    np.testing.assert_allclose(batched, jnp.stack([final(params, omega=w) for w in omegas]), rtol=1e-13)

    def along(value, adjoint=None):
        return final({**params, key: value}, adjoint=adjoint)

    # Central differences of values that Newton's method solves to ~1e-12: eps = 1e-4 keeps
    # their error near 1e-8 (with eps = 1e-6 it is ~1e-6, measured on the VI), the truncation ~eps².
    value, eps = params[key], 1e-4
    difference = (along(value + eps) - along(value - eps)) / (2 * eps)
    # DirectAdjoint stores every step; CheckpointedAdjoint and StepwiseAdjoint replay the same
    # steps (tests/test_gradients.py compares them); ReversibleAdjoint reconstructs them.
    adjoints = [s2.DirectAdjoint()] + ([s2.ReversibleAdjoint()] if integrator.is_symmetric else [])
    for adjoint in adjoints:
        gradient = jax.grad(along)(value, adjoint)
        np.testing.assert_allclose(gradient, difference, rtol=1e-6, atol=1e-8, err_msg=type(adjoint).__name__)


def test_every_integrator_is_registered():
    """The registry holds one instance of every public integrator class (and nothing steps unregistered)."""
    public = [getattr(s2, name) for name in dir(s2)]
    classes = {c for c in public if isinstance(c, type) and issubclass(c, (s2.AbstractIntegrator,
               s2.AbstractAdaptiveIntegrator)) and not c.__name__.startswith("Abstract")}
    assert classes == {type(i) for i in REGISTRY}


def test_args_are_prepared_once():
    """The plan's system prepares its args (M and its structure) from q0 alone: a fixed point."""
    the_plan, params, q0, _ = _planned(s2.VariationalIntegrator())
    args = the_plan.system.prepare(q0, params)
    assert isinstance(args, SystemArgs)
    np.testing.assert_array_equal(args.inertia.matrix, the_plan.system.prepare(-q0, params).inertia.matrix)
