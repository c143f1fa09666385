"""The closure stage's tables (``lens_assets/closure.py``): each with its contract and audits."""

from __future__ import annotations

from darkhaloscope.evaluation.closure import CLOSURE_SCHEMA
from darkhaloscope.evaluation.forecast import FORECAST_SCHEMA
from lake_platform.audits import Audit
from lake_platform.contracts import Contract, Range

from .columns import described, from_schema
from .table import Table

SELECTION_CLOSURE_CONTRACT = Audit(
    "selection_closure_contract", "counts, pulls and power per threshold, method and θ_E bin"
)
CLOSURE_NO_LEAK = Audit(
    "closure_no_leak",
    "no hidden lens of the mock is a threshold negative, an injection host or in the training set",
)

SELECTION_CLOSURE = Table(
    "evaluation",
    "selection_closure",
    "hidden lenses the search recovers against the number predicted per lens (detection model) and from the "
    "population's C, per threshold and θ_E bin, with the power to see a 15 % bias (mock)",
    Contract(
        table="selection_closure",
        columns=from_schema(
            CLOSURE_SCHEMA,
            described(
                CLOSURE_SCHEMA,
                {
                    "method": ("", "per_lens: Σ P_det at each lens's ψ; population: Σ C(cell | mock population)"),
                    "n_hidden": ("", "hidden lenses of the mock in the bin that both methods can predict"),
                    "n_predicted": ("", "hidden lenses the method predicts the search finds"),
                    "n_predicted_sd": ("", "sd of n_predicted: the model's (or C's) uncertainty and the binomial draw"),
                    "n_recovered": ("", "hidden lenses the search scored above the threshold"),
                    "power_15pct": ("", "the pull a 15 % bias of C would give: 0.15 n_predicted / n_predicted_sd"),
                },
            ),
        ),
        key=("threshold_name", "method", "bin"),
        ranges=(Range("n_hidden", 0, None), Range("n_recovered", 0, None), Range("n_predicted_sd", 0.0, None)),
        allowed_values={"method": ("per_lens", "population")},
    ),
    None,
    (SELECTION_CLOSURE_CONTRACT, CLOSURE_NO_LEAK),
)

LENS_FORECAST_CONTRACT = Audit(
    "lens_forecast_contract", "expected detected lenses per deg² and in the searched area, per θ_E bin and overall"
)

LENS_FORECAST = Table(
    "evaluation",
    "lens_forecast",
    "expected lenses the search finds per deg² and in the searched area: the LensPop-like population's lenses per "
    "cell times C reweighted to it",
    Contract(
        table="lens_forecast",
        columns=from_schema(
            FORECAST_SCHEMA,
            described(
                FORECAST_SCHEMA,
                {
                    "area_deg2": ("deg2", "searched area: the searched sweep files' RA/Dec boxes"),
                    "n_per_deg2": ("1/deg2", "expected lenses the search finds per square degree"),
                    "n_per_deg2_sd": ("1/deg2", "sd of n_per_deg2 from C's intervals"),
                    "n_in_area": ("", "expected lenses the search finds in the searched area"),
                    "n_in_area_sd": ("", "sd of n_in_area"),
                    "n_lensed_per_deg2": ("1/deg2", "lenses of the population in the bin before detection"),
                    "n_unmeasured_per_deg2": ("1/deg2", "of them in cells whose N_eff is below the floor"),
                },
            ),
        ),
        key=("threshold_name", "population", "bin"),
        ranges=(
            Range("area_deg2", 0.0, None),
            Range("n_per_deg2", 0.0, None),
            Range("n_per_deg2_sd", 0.0, None),
            Range("n_in_area", 0.0, None),
            Range("n_in_area_sd", 0.0, None),
            Range("n_lensed_per_deg2", 0.0, None),
            Range("n_unmeasured_per_deg2", 0.0, None),
        ),
    ),
    None,
    (LENS_FORECAST_CONTRACT,),
)

#: The closure stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SELECTION_CLOSURE,
    LENS_FORECAST,
)
