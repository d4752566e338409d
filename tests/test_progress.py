"""`simulate(..., progress=True)`: "compiling …" before compiling, the bar from the first block."""

import jax
import jax.numpy as jnp
import numpy as np

import s2jax as s2


def _pendulum(q, qdot, params):
    return 0.5 * jnp.sum(qdot**2) + params["g"] * q[0, 2]


def _run(num_steps, g=9.81):
    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])
    return s2.simulate(_pendulum, q0, omega0, {"g": g}, dt=1e-3, num_steps=num_steps, save_every=5, progress=True)


def test_compiling_is_announced_and_the_bar_starts_at_the_first_block(capfd):
    _run(4000)
    chunks = capfd.readouterr().err.split("\r")
    assert chunks[0] == "  compiling …"
    assert chunks[1].strip().startswith("[") and chunks[1].strip().endswith("] 5/4000 steps")
    assert chunks[-1].strip().endswith("4000/4000 steps")
    # A compiled simulation reused (new parameter values do not recompile) is not announced.
    _run(4000, g=9.0)
    err = capfd.readouterr().err
    assert "compiling" not in err and err.strip().endswith("4000/4000 steps")


def test_reproduce_announces_compiling_before_its_ahead_of_time_compile(capfd):
    """`python -m s2jax reproduce 4` compiled for 15 s in silence: compile_simulation traces
    `simulate`, which says "compiling …" before XLA starts."""
    from s2jax.apps.reproduce import compile_simulation

    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])
    run, _ = compile_simulation(
        _pendulum, q0, omega0, {"g": 9.81}, dt=1e-3, num_steps=400, integrator=s2.VariationalIntegrator(),
        save_every=4, progress=True,
    )
    assert capfd.readouterr().err == "  compiling …"
    run()
    chunks = capfd.readouterr().err.split("\r")
    assert chunks[1].strip().endswith("] 4/400 steps") and chunks[-1].strip().endswith("400/400 steps")


def test_compiling_is_said_once_for_a_gradient_through_the_reversible_adjoint(capfd):
    """ReversibleAdjoint traces the loop twice (forward, and backward with −h); one message."""
    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])

    def final_x(g):
        sol = s2.simulate(_pendulum, q0, omega0, {"g": g}, dt=1e-3, num_steps=100, save_every=4,
                          progress=True, adjoint=s2.ReversibleAdjoint())
        return sol.q[-1, 0, 0]

    jax.grad(final_x)(jnp.array(9.81))
    assert capfd.readouterr().err.count("compiling") == 1
