"""The closure stage's tables (``lens_assets/closure.py``): each with its contract and audits."""

from __future__ import annotations

from darkhaloscope.evaluation.closure import CLOSURE_SCHEMA
from darkhaloscope.evaluation.forecast import FORECAST_SCHEMA
from lake_platform.audits import Audit
from lake_platform.contracts import Contract, Range

from .columns import described, from_schema
from .table import Table

SELECTION_CLOSURE_CONTRACT = Audit("selection_closure_contract", "counts and pulls per θ_E bin and overall")

SELECTION_CLOSURE = Table(
    "evaluation",
    "selection_closure",
    "hidden lenses the search recovers against the number the selection model predicts, per θ_E bin (mock)",
    Contract(
        table="selection_closure",
        columns=from_schema(
            CLOSURE_SCHEMA,
            described(
                CLOSURE_SCHEMA,
                {
                    "n_hidden": ("", "hidden lenses of the mock in the bin whose host the finder never saw"),
                    "n_predicted": ("", "hidden lenses the selection model predicts the search finds (Σ P(detected))"),
                    "n_predicted_sd": ("", "sd of n_predicted: the model's bootstrap and the binomial draw"),
                    "n_recovered": ("", "hidden lenses the search scored above the threshold"),
                },
            ),
        ),
        key=("threshold_name", "bin"),
        ranges=(Range("n_hidden", 0, None), Range("n_recovered", 0, None), Range("n_predicted_sd", 0.0, None)),
    ),
    None,
    (SELECTION_CLOSURE_CONTRACT,),
)

LENS_FORECAST_CONTRACT = Audit(
    "lens_forecast_contract", "expected detected lenses per deg² and in the searched area, per θ_E bin and overall"
)

LENS_FORECAST = Table(
    "evaluation",
    "lens_forecast",
    "expected lenses the search finds per deg² and in the searched area: the selection model folded with a "
    "velocity dispersion function and source counts (and, on the mock, with its hidden lenses, against their truth)",
    Contract(
        table="lens_forecast",
        columns=from_schema(
            FORECAST_SCHEMA,
            described(
                FORECAST_SCHEMA,
                {
                    "area_deg2": ("deg2", "searched area: the searched sweep files' RA/Dec boxes"),
                    "n_per_deg2": ("1/deg2", "expected lenses the search finds per square degree"),
                    "n_per_deg2_sd": ("1/deg2", "sd of n_per_deg2 from the selection model's bootstrap"),
                    "n_in_area": ("", "expected lenses the search finds in the searched area"),
                    "n_in_area_sd": ("", "sd of n_in_area from the selection model's bootstrap"),
                    "n_lensed_per_deg2": ("1/deg2", "lenses of the population before detection (P_det = 1)"),
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
            Range("n_lensed_per_deg2", 0.0, None, nullable=True),
            Range("n_truth", 0, None, nullable=True),
        ),
        allowed_values={"population": ("vdf", "mock")},
    ),
    None,
    (LENS_FORECAST_CONTRACT,),
)

#: The closure stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SELECTION_CLOSURE,
    LENS_FORECAST,
)
