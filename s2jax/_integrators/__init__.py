from .base import AbstractIntegrator as AbstractIntegrator
from .runge_kutta import (
    RungeKutta2 as RungeKutta2,
    RungeKutta2WithReprojection as RungeKutta2WithReprojection,
    RungeKutta4 as RungeKutta4,
)
from .variational import (
    ExplicitVariationalIntegrator as ExplicitVariationalIntegrator,
    VariationalIntegrator as VariationalIntegrator,
)
from .adaptive import AdaptiveRungeKutta45 as AdaptiveRungeKutta45
from .composition import Composition as Composition
