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
from .substeps import Substeps as Substeps
from .variational import (
    ExplicitVariationalIntegrator as ExplicitVariationalIntegrator,
    VariationalIntegrator as VariationalIntegrator,
)

REGISTRY = (
    VariationalIntegrator(),
    ExplicitVariationalIntegrator(),
    Rattle(),
    StormerVerlet(),
    DiscreteHamelIntegrator(),
    Composition(VariationalIntegrator(), order=4),
    Composition(Rattle(), order=6, method="kahan_li"),
    Substeps(Rattle(), 2),
    GeneralVariationalIntegrator(),
    HamiltonianRattle(),
    RungeKutta2(),
    RungeKutta2WithReprojection(),
    RungeKutta4(),
    LieEuler(),
    LieEulerHeun(),
    RKMK3(),
    RKMK4(),
    CommutatorFreeRK4(),
    AdaptiveRungeKutta45(),
)
"""Every integrator of s2jax, one instance each: what the integrator contract test
(tests/test_integrator_contract.py) and the docs' composition table run over. A new integrator
is its own file, its import and one line here, its export in `s2jax/__init__.py`, and the docs'
table rewritten by `python tests/test_composition_matrix.py`; its `system_type` decides where it
runs."""
