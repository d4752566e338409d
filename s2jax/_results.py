"""Result codes of a step and of a simulation, in the style of optimistix's `RESULTS`."""

import equinox as eqx
import jax
import numpy as np


class RESULTS(eqx.Enumeration):
    """What happened in a step. `successful` is the only code that lets a simulation go on."""

    successful = ""
    newton_failed = (
        "Newton's method did not solve the step's implicit equations (for VariationalIntegrator, "
        "the Cayley equation (3.16) of Lee–Leok–McClamroch 2009) within its iteration cap; try a "
        "smaller step"
    )
    step_too_large = (
        "the step is too large: the integrator's step equations have no solution at this step size "
        "(the error raised by simulate names the integrator's own condition)"
    )
    nonfinite_state = "the state became non-finite (NaN or inf)"
    inertia_not_diagonal = (
        "this integrator needs a diagonal inertia matrix M (e.g. the explicit variational "
        "integrator (3.17)–(3.18)); use VariationalIntegrator"
    )
    invalid_initial_state = (
        "the initial state is not a finite point of T(S²)ⁿ (|q_i| ≠ 1 or q_i·ω_i ≠ 0 beyond "
        "1e-12) or dt ≤ 0"
    )
    invalid_parameters = (
        "a parameter (a float leaf of params) is not finite (NaN or inf), or one that the model declares "
        "positive (s2jax.positive_parameters) is ≤ 0"
    )
    invalid_controls = "a control (a row of `controls`) is not finite (NaN or inf)"
    optimisation_not_converged = (
        "the trajectory optimisation did not meet its tolerances (inner convergence and "
        "|terminal constraint| ≤ constraint_tolerance) within its iteration caps, or stopped "
        "after a round that lowered neither the violation nor the cost"
    )
    not_lagrangian_form = (
        "the Lagrangian is not of the form (2.2) of Lee–Leok–McClamroch 2009 at the initial state "
        "(found inside a traced computation; s2jax.check_lagrangian_form(lagrangian, q0, omega0, "
        "params) with concrete values says which body and why)"
    )
    inertia_not_chain = (
        "the inertia matrix is not a chain's (M_ij = c_max(i,j) l_i l_j with positive masses), as "
        "LagrangianSystem(inertia_structure=\"chain\") declared, or as s2jax recognised it at random "
        "values of the traced params; pass LagrangianSystem(lagrangian, inertia_structure=\"dense\")"
    )
    adaptive_solver_failed = "the adaptive Runge–Kutta baseline failed (too many steps or a step size underflow)"
    inertia_not_positive_definite = (
        "the inertia is not positive definite (found at the initial state, inside a traced computation): "
        "M of the form (2.2) of Lee–Leok–McClamroch 2009, or ∂²L/∂q̇∂q̇ on the tangent spaces at the initial "
        "state for a GeneralLagrangianSystem, has an eigenvalue ≤ 1e-12 × its largest entry (a zero or "
        "negative mass, a zero length?); simulate with concrete values names the smallest eigenvalue"
    )
    real_time_iteration_refused = (
        "a real-time iteration of model predictive control was refused (a Q_uu not positive definite, or the "
        "rollout of its full step failed): the previous prediction's controls were applied"
    )
    continuous_miss_above_fidelity = (
        "the controls are optimal for the discrete model, but the continuous system they drive misses its "
        "trajectory by more than Problem.fidelity (ControlSolution.continuous_miss): refine the dynamics with "
        "Problem(substeps=...), which solve does itself outside jax.jit / jax.vmap / jax.grad, or pass fidelity=None"
    )
    fit_failed = (
        "s2jax.fit could not evaluate its residuals at the initial guess (observations not finite, or a "
        "segment's simulation failed) or at its last iterate (a segment's simulation failed)"
    )


SUCCESSFUL_CODE = int(RESULTS.successful._value)
"""`RESULTS.successful` as a Python int: what a code read back on the host (`Array.item()`) is
compared with in a per-call path (`Stepper`, repeated eager `simulate`)."""


def _names(values) -> np.ndarray:
    """The item names of an array of RESULTS codes (same shape), as a numpy array of str."""
    index_to_name = {int(item._value): name for name, item in RESULTS._name_to_item.items()}
    return np.vectorize(lambda i: index_to_name.get(int(i), f"<unknown code {int(i)}>"), otypes=[str])(values)


def _results_repr(item) -> str:
    """`RESULTS.successful` for one code; `RESULTS[successful, newton_failed]` for a batch of
    codes (e.g. under `jax.vmap`); `RESULTS<traced>` inside a traced computation.

    `repr(Solution)` shows its `result` this way. A bare `repr(item)` stays equinox's own
    (`s2jax._results.RESULTS<message>`): the item class is shared by every `eqx.Enumeration`,
    so s2jax leaves its `__repr__` alone."""
    value = item._value
    if isinstance(value, jax.core.Tracer):
        return "RESULTS<traced>"
    if not isinstance(value, (np.ndarray, jax.Array)):
        return "RESULTS<unknown>"
    names = _names(np.asarray(value))
    if names.ndim == 0:
        return f"RESULTS.{names.item()}"
    body = np.array2string(names, separator=", ", formatter={"all": str}, threshold=20)
    return f"RESULTS{body}"
