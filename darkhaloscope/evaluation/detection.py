"""The detection model P_det(ψ | threshold): the probability that a lens with parameters ψ is found
(scores above the threshold), fitted on the scored injection bank, one model per threshold.

ψ is what a population model specifies, never a quantity of the rendered image: the lens (θ_E, z_l,
the lens galaxy's z magnitude, its axis ratio, the external shear), the source (unlensed r
magnitude, half-light radius, Sérsic index, position β/θ_E, axis ratio, colours) and the observing
conditions at the host (PSF FWHM and 5σ point-source depth in r) — :data:`FEATURES`. The model is
scikit-learn's ``HistGradientBoostingClassifier`` (gradient-boosted trees: interactions between
source size, position and θ_E without a functional form), constrained to fall with the PSF's width
and to rise with the depth (``monotonic_cst``), which keeps a sparse corner of ψ from inverting them.
The source's magnitude is left free: the finder's completeness is not monotone in the arc's
brightness (arcs of S/N ≥ 50 are found less often than those of S/N 20–50), and a fit forced to
fall with the magnitude flattens the peak where a bright population's lenses sit.

Calibration is measured on injections the fit did not see: 4-fold cross-validation with every
host's injections in one fold (``GroupKFold``: a host's injections share their outcome), giving a
reliability curve and the Brier score of the out-of-fold probabilities, beside the Brier score of
a logistic regression on the same features (the simpler model the measurements are compared with)
and of the base rate. Uncertainty: refits on bootstrap resamples of the hosts (``replica`` k > 0).

Validity: the model is defined inside the proposal's support (``lensing.priors.PROPOSALS``) for the
parameters the proposal drew, and inside the range the bank's hosts span for the others (θ_E within
the grid's outer edges); :meth:`DetectionModel.check_support` refuses anything outside by name,
never extrapolates. No model object is stored (nothing is loaded with pickle): a fit is a pure
function of the scored bank and the threshold (fixed seeds), so every reader refits the same trees;
``selection_model`` publishes its parameters, their ranges and its calibration.

Units: angles arcsec, magnitudes AB, depth the 5σ point-source AB magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..constants import depth_mag_from_psfdepth
from ..errors import InputError
from ..lensing.priors import PriorRegistry
from ..seeding import rng_for
from .thresholds import usable_thresholds


@dataclass(frozen=True)
class Feature:
    """One model input: ``name`` (the feature), the raw ``columns`` it is made of, its ``unit``,
    ``monotone`` (+1 rising, −1 falling, 0 free) and whether the proposal drew it (``proposal``:
    its validity range is the proposal's, else the bank's)."""

    name: str
    columns: tuple[str, ...]
    unit: str
    monotone: int
    proposal: bool
    description: str


FEATURES = (
    Feature("theta_e_arcsec", ("theta_e_arcsec",), "arcsec", 0, False, "Einstein radius"),
    Feature("z_l", ("z_l",), "", 0, False, "lens redshift"),
    Feature("lens_mag_z", ("lens_mag_z",), "AB mag", 0, False, "lens galaxy z magnitude, dereddened"),
    Feature("lens_q", ("lens_q",), "", 0, False, "lens mass axis ratio"),
    Feature("shear", ("shear_g1", "shear_g2"), "", 0, False, "external shear |gamma|"),
    Feature("src_mag_r", ("src_mag_r",), "AB mag", 0, True, "unlensed source r magnitude"),
    Feature("log10_src_r_sersic", ("src_r_sersic_arcsec",), "log10 arcsec", 0, True, "source half-light radius"),
    Feature("src_beta_frac", ("src_beta_frac",), "theta_E", 0, True, "source position |beta| / theta_E"),
    Feature("src_n_sersic", ("src_n_sersic",), "", 0, True, "source Sersic index"),
    Feature("src_q", ("src_q",), "", 0, True, "source axis ratio"),
    Feature("src_g_minus_r", ("src_g_minus_r",), "mag", 0, True, "source g - r"),
    Feature("src_r_minus_z", ("src_r_minus_z",), "mag", 0, True, "source r - z"),
    Feature("psf_fwhm_r", ("psf_fwhm_r",), "arcsec", -1, False, "r-band PSF FWHM at the host"),
    Feature("depth_mag_r", ("psfdepth_r",), "AB mag", 1, False, "r-band 5 sigma point-source depth at the host"),
)
#: Raw columns the model reads.
PARAMETERS = tuple(dict.fromkeys(c for f in FEATURES for c in f.columns))
#: Hyperparameters of every fit (fixed: a fit is a pure function of its rows).
HGB_PARAMS = dict(
    max_iter=100,
    learning_rate=0.1,
    max_leaf_nodes=15,
    min_samples_leaf=20,
    l2_regularization=1.0,
    early_stopping=False,
    random_state=0,
)
#: Host-bootstrap refits behind the model's uncertainty.
N_BOOTSTRAP = 16
#: Folds of the host-grouped cross-validation the calibration is measured on.
N_FOLDS = 4
#: Reliability bins of the predicted probability.
RELIABILITY_EDGES = np.linspace(0.0, 1.0, 11)


def feature_values(columns: dict) -> np.ndarray:
    """(N, len(FEATURES)) model inputs from raw PARAMETERS columns (dict of arrays or a table)."""
    if isinstance(columns, pa.Table):
        names = set(columns.column_names)

        def get(c):
            return columns.column(c).to_numpy(zero_copy_only=False) if c in names else None
    else:
        get = columns.get
    out = []
    for f in FEATURES:
        raw = [get(c) for c in f.columns]
        if any(r is None for r in raw):
            raise InputError(f"detection model needs columns {list(f.columns)} for {f.name}")
        raw = [np.asarray(r, dtype=np.float64) for r in raw]
        if f.name == "shear":
            v = np.hypot(raw[0], raw[1])
        elif f.name == "log10_src_r_sersic":
            v = np.log10(raw[0])
        elif f.name == "depth_mag_r":
            v = depth_mag_from_psfdepth(raw[0])
        else:
            v = raw[0]
        out.append(v)
    return np.stack(out, axis=1)


@dataclass
class DetectionModel:
    """P_det at one threshold: the central fit (replica 0) and host-bootstrap refits; ``support``
    {feature: (lo, hi)} the range each feature is valid on (feature units)."""

    threshold_name: str
    threshold: float
    support: dict
    estimators: list = field(repr=False)
    n_injections: int = 0
    n_hosts: int = 0
    n_detected: int = 0

    def outside_support(self, x: np.ndarray) -> np.ndarray:
        """(N,) bool: rows of features ``x`` outside the model's support in any feature."""
        out = ~np.all(np.isfinite(x), axis=1)
        for i, f in enumerate(FEATURES):
            lo, hi = self.support[f.name]
            out |= (x[:, i] < lo - 1e-9) | (x[:, i] > hi + 1e-9)
        return out

    def check_support(self, x: np.ndarray) -> None:
        """InputError naming the first feature (its value and range) that any row leaves."""
        for i, f in enumerate(FEATURES):
            lo, hi = self.support[f.name]
            bad = ~np.isfinite(x[:, i]) | (x[:, i] < lo - 1e-9) | (x[:, i] > hi + 1e-9)
            if bad.any():
                raise InputError(
                    f"detection model ({self.threshold_name}): {f.name} ({', '.join(f.columns)}) = "
                    f"{x[bad, i][:3].tolist()} outside its validity range [{lo:.6g}, {hi:.6g}] {f.unit}; "
                    "the model does not extrapolate"
                )

    def probability(self, columns, replica: int = 0) -> np.ndarray:
        """P_det (N,) at raw PARAMETERS ``columns`` (refused outside the support)."""
        x = feature_values(columns)
        self.check_support(x)
        if not 0 <= replica < len(self.estimators):
            raise InputError(f"detection model has replicas 0..{len(self.estimators) - 1}, not {replica}")
        return self.estimators[replica].predict_proba(x)[:, 1]

    def probabilities(self, columns) -> np.ndarray:
        """(replicas, N) P_det of every replica (row 0 the central fit)."""
        x = feature_values(columns)
        self.check_support(x)
        return np.stack([e.predict_proba(x)[:, 1] for e in self.estimators])


def _estimator():
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(monotonic_cst=[f.monotone for f in FEATURES], **HGB_PARAMS)


def model_support(x: np.ndarray, proposal: PriorRegistry, theta_e_edges) -> dict:
    """Validity range of each feature: the proposal's prior range for the parameters it drew, θ_E's
    grid edges, the bank's range for the rest (``x``: the fitted rows' features)."""
    out = {}
    for i, f in enumerate(FEATURES):
        if f.proposal:
            p = proposal[f.columns[0]]
            lo, hi = (math.log10(p.lo), math.log10(p.hi)) if f.name == "log10_src_r_sersic" else (p.lo, p.hi)
        elif f.name == "theta_e_arcsec":
            lo, hi = float(theta_e_edges[0]), float(theta_e_edges[-1])
        else:
            lo, hi = float(np.nanmin(x[:, i])), float(np.nanmax(x[:, i]))
        out[f.name] = (float(lo), float(hi))
    return out


def _rows(injections: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, scores, host index) of the valid injections."""
    missing = [c for c in (*PARAMETERS, "score", "valid", "host_object_id") if c not in injections.column_names]
    if missing:
        raise InputError(f"injection scores lack {missing} for the detection model")
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    rows = injections.filter(pa.array(valid))
    x = feature_values(rows)
    score = np.asarray(rows.column("score").to_numpy(zero_copy_only=False), dtype=np.float64)
    _, host = np.unique(np.asarray(rows.column("host_object_id").to_numpy()), return_inverse=True)
    finite = np.all(np.isfinite(x), axis=1)
    return x[finite], score[finite], host[finite]


def fit_detection_model(
    injections: pa.Table,
    threshold_name: str,
    threshold: float,
    proposal: PriorRegistry,
    theta_e_edges,
    n_bootstrap: int = N_BOOTSTRAP,
) -> DetectionModel:
    """The detection model of one threshold (score > ``threshold``) on the valid injections, with
    ``n_bootstrap`` host-bootstrap refits (``rng_for('detection-model', threshold_name, k)``).
    InputError when every injection is detected or none is."""
    x, score, host = _rows(injections)
    y = (score > threshold).astype(np.int8)
    if y.min() == y.max():
        raise InputError(f"{threshold_name}: {int(y.sum())} of {y.size} valid injections detected: nothing to fit")
    n_hosts = int(host.max()) + 1
    members = [np.flatnonzero(host == h) for h in range(n_hosts)]
    estimators = [_estimator().fit(x, y)]
    for k in range(1, n_bootstrap + 1):
        pick = rng_for("detection-model", threshold_name, k).integers(0, n_hosts, n_hosts)
        idx = np.concatenate([members[h] for h in pick])
        if y[idx].min() == y[idx].max():
            continue  # a resample of one class has no model; the others carry the spread
        estimators.append(_estimator().fit(x[idx], y[idx]))
    return DetectionModel(
        threshold_name,
        float(threshold),
        model_support(x, proposal, theta_e_edges),
        estimators,
        int(y.size),
        n_hosts,
        int(y.sum()),
    )


def detection_models(
    injections: pa.Table, thresholds: pa.Table, proposal: PriorRegistry, theta_e_edges, n_bootstrap: int = N_BOOTSTRAP
) -> tuple[dict[str, DetectionModel], dict[str, str]]:
    """({threshold name: model}, {threshold name: why no model}) at every usable threshold
    (:func:`fit_detection_model`): a threshold every valid injection passes, or none does, has no
    model and is named with the reason."""
    models, not_fitted = {}, {}
    for name, value in usable_thresholds(thresholds):
        try:
            models[name] = fit_detection_model(injections, name, value, proposal, theta_e_edges, n_bootstrap)
        except InputError as exc:
            not_fitted[name] = str(exc)
    return models, not_fitted


def cross_validated(injections: pa.Table, threshold: float) -> dict:
    """Out-of-fold P_det of every valid injection (N_FOLDS host-grouped folds) with the Brier
    scores of the model, of a logistic regression on standardised features and of the base rate:
    {"p", "p_logistic", "detected", "brier", "brier_logistic", "brier_base"}."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, score, host = _rows(injections)
    y = (score > threshold).astype(np.int8)
    p, p_lin = np.full(y.size, np.nan), np.full(y.size, np.nan)
    for train, test in GroupKFold(n_splits=min(N_FOLDS, int(host.max()) + 1)).split(x, y, host):
        if y[train].min() == y[train].max():
            p[test] = p_lin[test] = y[train].mean()
            continue
        p[test] = _estimator().fit(x[train], y[train]).predict_proba(x[test])[:, 1]
        lin = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        p_lin[test] = lin.fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    base = float(y.mean())
    return {
        "p": p,
        "p_logistic": p_lin,
        "detected": y.astype(bool),
        "brier": float(np.mean((p - y) ** 2)),
        "brier_logistic": float(np.mean((p_lin - y) ** 2)),
        "brier_base": base * (1 - base),
    }


SELECTION_MODEL_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("threshold", pa.float64(), nullable=False),
        pa.field("parameter", pa.string(), nullable=False),
        pa.field("columns", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),
        pa.field("valid_lo", pa.float64(), nullable=False),
        pa.field("valid_hi", pa.float64(), nullable=False),
        pa.field("monotone", pa.int8(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("n_injections", pa.int64(), nullable=False),
        pa.field("n_hosts", pa.int64(), nullable=False),
        pa.field("n_detected", pa.int64(), nullable=False),
        pa.field("n_replicas", pa.int64(), nullable=False),
        pa.field("brier_cv", pa.float64(), nullable=False),
        pa.field("brier_cv_logistic", pa.float64(), nullable=False),
        pa.field("brier_base", pa.float64(), nullable=False),
    ]
)

CALIBRATION_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("p_lo", pa.float64(), nullable=False),
        pa.field("p_hi", pa.float64(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("mean_predicted", pa.float64()),
        pa.field("observed", pa.float64()),
        pa.field("observed_ci68_lo", pa.float64()),
        pa.field("observed_ci68_hi", pa.float64()),
    ]
)


def model_table(model: DetectionModel, cv: dict) -> pa.Table:
    """SELECTION_MODEL_SCHEMA rows of one threshold's model: one per feature, with its columns,
    unit, validity range and monotonicity, and the model's counts and cross-validated Brier scores."""
    rows = []
    for f in FEATURES:
        lo, hi = model.support[f.name]
        rows.append(
            {
                "threshold_name": model.threshold_name,
                "threshold": model.threshold,
                "parameter": f.name,
                "columns": ",".join(f.columns),
                "unit": f.unit,
                "valid_lo": lo,
                "valid_hi": hi,
                "monotone": f.monotone,
                "model": "sklearn.ensemble.HistGradientBoostingClassifier",
                "n_injections": model.n_injections,
                "n_hosts": model.n_hosts,
                "n_detected": model.n_detected,
                "n_replicas": len(model.estimators),
                "brier_cv": cv["brier"],
                "brier_cv_logistic": cv["brier_logistic"],
                "brier_base": cv["brier_base"],
            }
        )
    return pa.Table.from_pylist(rows, schema=SELECTION_MODEL_SCHEMA)


def reliability_table(threshold_name: str, cv: dict) -> pa.Table:
    """CALIBRATION_SCHEMA rows: the out-of-fold probabilities in RELIABILITY_EDGES bins against the
    fraction detected (Jeffreys 68 % interval): a calibrated model lies on the diagonal."""
    from ..stats import jeffreys_interval

    e = RELIABILITY_EDGES
    b = np.clip(np.searchsorted(e, cv["p"], side="right") - 1, 0, e.size - 2)
    n = np.bincount(b, minlength=e.size - 1)
    k = np.bincount(b, weights=cv["detected"].astype(float), minlength=e.size - 1)
    sp = np.bincount(b, weights=cv["p"], minlength=e.size - 1)
    lo, hi = jeffreys_interval(k, n, 0.68)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p, obs = sp / n, k / n
    rows = [
        {
            "threshold_name": threshold_name,
            "p_lo": float(e[i]),
            "p_hi": float(e[i + 1]),
            "n": int(n[i]),
            "mean_predicted": float(mean_p[i]) if n[i] else None,
            "observed": float(obs[i]) if n[i] else None,
            "observed_ci68_lo": float(lo[i]) if n[i] else None,
            "observed_ci68_hi": float(hi[i]) if n[i] else None,
        }
        for i in range(e.size - 1)
    ]
    return pa.Table.from_pylist(rows, schema=CALIBRATION_SCHEMA)
