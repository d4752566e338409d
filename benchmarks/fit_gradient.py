"""The derivative of a fit's optimum (issue 30, item 4): its error and its cost relative to one fit.

    python benchmarks/fit_gradient.py [--repeats 5]

The fit of `benchmarks/batched_fits.py` (double spherical pendulum of 002 Example 1, 3 s, the
direction of body 2 every 5 steps with noise σ = 10⁻³, l₁, l₂, m₂ free, 2 segments), differentiated
with respect to a known param (g) and the data; the reference is central differences of
converged re-fits:

- d(l₁*, l₂*, m₂*)/dg, `jax.jacfwd` through `fit`, against central differences in g (step 10⁻⁴ g);
- the derivative of l₂* along a random direction of the data, `jax.jvp`, against central
  differences (step 10⁻⁵), and `jax.grad` (the whole gradient in the data) against that jvp.

Times are medians of `--repeats` runs after a compiling call; the first calls (compile included)
are recorded. Results: benchmarks/results/fit_gradient.json with the machine and the load.
"""

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import timed, write  # noqa: E402
from batched_fits import FREE, setup  # noqa: E402

import s2jax as s2  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    one, data = setup(1)
    data = data[0]

    def fitted(g, observations):
        result = one(observations, g)
        return jnp.stack([result.params[key] for key in FREE])

    g = s2.models.double_spherical_pendulum.paper_params()["g"]
    direction = np.random.default_rng(1).normal(size=data.shape)
    calls = {
        "fit": lambda: fitted(g, data),
        "jacfwd_in_g": lambda: jax.jacfwd(fitted)(g, data),
        "jvp_in_data": lambda: jax.jvp(lambda y: fitted(g, y)[1], (jnp.asarray(data),), (jnp.asarray(direction),)),
        "grad_in_data": lambda: jax.grad(lambda y: fitted(g, y)[1])(jnp.asarray(data)),
    }
    first = {name: timed(call) for name, call in calls.items()}
    times = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            times[name].append(timed(call))
    median = {name: float(np.median(t)) for name, t in times.items()}

    in_g = np.asarray(calls["jacfwd_in_g"]())
    step_g = 1e-4 * g
    central_g = (np.asarray(fitted(g + step_g, data)) - np.asarray(fitted(g - step_g, data))) / (2 * step_g)
    along = float(calls["jvp_in_data"]()[1])
    step = 1e-5
    central_data = (float(fitted(g, data + step * direction)[1]) - float(fitted(g, data - step * direction)[1])) / (
        2 * step
    )
    gradient = np.asarray(calls["grad_in_data"]())
    rows = {
        "d_fitted_d_g": in_g.tolist(),
        "d_fitted_d_g_central": central_g.tolist(),
        # relative to the largest entry: dm2*/dg is 0 (l1 and l2 scale with g, m2 does not)
        "relative_error_in_g": float(np.max(np.abs(in_g - central_g)) / np.max(np.abs(central_g))),
        "d_l2_along_data": along,
        "d_l2_along_data_central": central_data,
        "relative_error_along_data": abs(along - central_data) / abs(central_data),
        "grad_dot_direction_vs_jvp": abs(float(np.sum(gradient * direction)) - along) / abs(along),
        "seconds_median": median,
        "seconds_first_call": first,
        "times_one_fit": {name: median[name] / median["fit"] for name in calls},
    }
    for name in calls:
        print(f"{name}: {median[name] * 1e3:.1f} ms ({rows['times_one_fit'][name]:.1f}x one fit), "
              f"first call {first[name]:.1f} s", flush=True)
    print(f"d(l1, l2, m2)/dg = {in_g}, central {central_g}, relative error {rows['relative_error_in_g']:.1e}")
    print(f"dl2 along the data = {along:.6e}, central {central_data:.6e}, "
          f"relative error {rows['relative_error_along_data']:.1e}; "
          f"grad·v vs jvp {rows['grad_dot_direction_vs_jvp']:.1e}")
    path = write(
        "fit_gradient",
        {
            "command": f"python benchmarks/fit_gradient.py --repeats {args.repeats}",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            **rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
