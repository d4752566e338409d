"""s2jax: differentiable variational integrators for mechanical systems on (S²)ⁿ.

On import, s2jax adds `xla_cpu_small_while_loop_byte_threshold=8388608` to the
`--xla_backend_extra_options` of the environment variable `XLA_FLAGS` (unless the option is set already;
if a JAX backend has started, too late, it only warns), so that XLA's CPU compiler runs a simulation's
loop as one compiled function instead of dispatching each operation: faster steps on CPU, nothing else
changes (measured: see docs/performance.md; from jaxlib 0.12, whose XLA compiles every loop whole,
the same value keeps loops of more than 8 MiB dispatched). Set `S2JAX_KEEP_XLA_FLAGS=1` before the import to leave
`XLA_FLAGS` alone. Extras: `pip install 's2jax[plot]'` (matplotlib, Pillow) for `s2jax.plot` and
`python -m s2jax`; `pip install 's2jax[baselines]'` (diffrax) for `AdaptiveRungeKutta45`.
"""


from . import forces as forces, io as io, models as models
from ._adjoint import (
    AbstractAdjoint as AbstractAdjoint,
    CheckpointedAdjoint as CheckpointedAdjoint,
    DirectAdjoint as DirectAdjoint,
    ReversibleAdjoint as ReversibleAdjoint,
    StepwiseAdjoint as StepwiseAdjoint,
    default_adjoint as default_adjoint,
)
from ._batch import simulate_batch as simulate_batch
from ._cache import default_cache_dir as default_cache_dir, enable_compilation_cache as enable_compilation_cache
from ._diagnostics import (
    energy as energy,
    figures_of_merit as figures_of_merit,
    momentum_map as momentum_map,
    tangency_error as tangency_error,
    unit_length_error as unit_length_error,
)
from ._errors import SimulationError as SimulationError
from ._force import AbstractForce as AbstractForce, Force as Force
from ._form_check import check_lagrangian_form as check_lagrangian_form
from ._general_system import GeneralLagrangianSystem as GeneralLagrangianSystem
from ._geometry import (
    cayley_rotate as cayley_rotate,
    hat as hat,
    project_tangent as project_tangent,
    random_state as random_state,
    retract_state as retract_state,
)
from ._hamiltonian import HamiltonianSystem as HamiltonianSystem, legendre_transform as legendre_transform
from ._inertia import Inertia as Inertia
from ._integrators import (
    RKMK3 as RKMK3,
    RKMK4 as RKMK4,
    AbstractAdaptiveIntegrator as AbstractAdaptiveIntegrator,
    AbstractIntegrator as AbstractIntegrator,
    AbstractRungeKutta as AbstractRungeKutta,
    AdaptiveRungeKutta45 as AdaptiveRungeKutta45,
    AutoIntegrator as AutoIntegrator,
    CommutatorFreeRK4 as CommutatorFreeRK4,
    Composition as Composition,
    DiscreteHamelIntegrator as DiscreteHamelIntegrator,
    ExplicitVariationalIntegrator as ExplicitVariationalIntegrator,
    GeneralVariationalIntegrator as GeneralVariationalIntegrator,
    HamiltonianRattle as HamiltonianRattle,
    LieEuler as LieEuler,
    LieEulerHeun as LieEulerHeun,
    Rattle as Rattle,
    RungeKutta2 as RungeKutta2,
    RungeKutta2WithReprojection as RungeKutta2WithReprojection,
    RungeKutta4 as RungeKutta4,
    StormerVerlet as StormerVerlet,
    Substeps as Substeps,
    VariationalIntegrator as VariationalIntegrator,
)
from ._jit import compiler_options as compiler_options, configure_xla_flags as _configure_xla_flags
from ._newton import NewtonSettings as NewtonSettings
from ._results import RESULTS as RESULTS
from ._simulate import Solution as Solution, simulate as simulate
from ._stepper import Stepper as Stepper
from ._system import (
    AbstractSystem as AbstractSystem,
    LagrangianSystem as LagrangianSystem,
    SystemArgs as SystemArgs,
)
from ._validation import check_initial_state as check_initial_state, positive_parameters as positive_parameters

# No module above starts a JAX backend on import, so this runs before any can: XLA reads its
# flags once, when the first backend starts (see `_jit`).
_configure_xla_flags()

__version__ = "0.1.0"


def __getattr__(name):
    # `s2jax.control` and `s2jax.fit` (optax and the optimisation layer) are loaded on first use,
    # as `s2jax.plot` is (which imports matplotlib, the `plot` extra, only when it draws): a
    # simulation alone does not pay for their import.
    if name in ("control", "fit", "plot"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 's2jax' has no attribute {name!r}")
