"""s2jax: differentiable variational integrators for mechanical systems on (S²)ⁿ."""

from . import models as models
from ._diagnostics import (
    energy as energy,
    figures_of_merit as figures_of_merit,
    momentum_map as momentum_map,
    tangency_error as tangency_error,
    unit_length_error as unit_length_error,
)
from ._geometry import (
    cayley_rotate as cayley_rotate,
    hat as hat,
    project_tangent as project_tangent,
    random_state as random_state,
)
from ._integrators import (
    AbstractIntegrator as AbstractIntegrator,
    AdaptiveRungeKutta45 as AdaptiveRungeKutta45,
    Composition as Composition,
    ExplicitVariationalIntegrator as ExplicitVariationalIntegrator,
    RungeKutta2 as RungeKutta2,
    RungeKutta2WithReprojection as RungeKutta2WithReprojection,
    RungeKutta4 as RungeKutta4,
    VariationalIntegrator as VariationalIntegrator,
)
from ._results import RESULTS as RESULTS
from ._simulate import Solution as Solution, SimulationError as SimulationError, simulate as simulate
from ._system import LagrangianSystem as LagrangianSystem, check_lagrangian_form as check_lagrangian_form

__version__ = "0.1.0"
