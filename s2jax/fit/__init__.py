"""Parameter identification: `fit` a model's parameters to observations of its motion.

`free` says which parameters are fitted and how each is written for the optimiser (`Positive`,
`Bounded`, `Unconstrained`); `observe` what is measured (`Directions`, `Positions`,
`PolarAngles`, or any function of (q, ω, params)). See docs/api/fit.md.
"""

from .._optimisation.parameterisation import (
    AbstractParameterisation as AbstractParameterisation,
    Bounded as Bounded,
    Positive as Positive,
    Unconstrained as Unconstrained,
)
from ._fit import FitResult as FitResult, fit as fit
from ._observation import Directions as Directions, PolarAngles as PolarAngles, Positions as Positions
