from .adaptive import AdaptiveRungeKutta45 as AdaptiveRungeKutta45
from .auto import AutoIntegrator as AutoIntegrator
from .base import AbstractAdaptiveIntegrator as AbstractAdaptiveIntegrator, AbstractIntegrator as AbstractIntegrator
from .composition import Composition as Composition
from .constrained import Rattle as Rattle, StormerVerlet as StormerVerlet
from .general_variational import GeneralVariationalIntegrator as GeneralVariationalIntegrator
from .hamel import DiscreteHamelIntegrator as DiscreteHamelIntegrator
from .hamiltonian import HamiltonianRattle as HamiltonianRattle
from .lie_group import (
    RKMK3 as RKMK3,
    RKMK4 as RKMK4,
    CommutatorFreeRK4 as CommutatorFreeRK4,
    LieEuler as LieEuler,
    LieEulerHeun as LieEulerHeun,
)
from .runge_kutta import (
    AbstractRungeKutta as AbstractRungeKutta,
    RungeKutta2 as RungeKutta2,
    RungeKutta2WithReprojection as RungeKutta2WithReprojection,
    RungeKutta4 as RungeKutta4,
)
from .variational import (
    ExplicitVariationalIntegrator as ExplicitVariationalIntegrator,
    VariationalIntegrator as VariationalIntegrator,
)
