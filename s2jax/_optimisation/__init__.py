"""The optimisation layer shared by parameter fitting (`s2jax.fit`) and trajectory optimisation
(`s2jax.control`): every loop runs inside one compiled program, so both work under `jax.jit` and
`jax.vmap` and hold no host callback.

- `optax_loop`: an optax optimiser in a `lax.while_loop` (the shooting solvers, `fit` with L-BFGS
  or Adam).
- `least_squares`: Levenberg–Marquardt stages on a penalised sum of squares, then Gauss–Newton with
  the constraints held at zero (`fit`'s default).
- `augmented_lagrangian`: the multiplier rounds around a control solver's inner minimisation.
- `shooting`, `chart`: multiple shooting on T(S²)ⁿ with segment starts in a chart (both).
- `parameterisation`: unconstrained variables for bounded controls and constrained parameters.
- `progress`: the heartbeat on stderr of `progress=True`.
"""
