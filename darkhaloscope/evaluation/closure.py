"""P(detected | θ_E, arc S/N, lens magnitude) fitted over the injection bank, and the closure test:
does the selection function predict how many of the mock's hidden lenses the search finds?

The marginal C(θ_E, z_l) averages over the injection prior (arc S/N set by source magnitudes drawn
22–26), so it predicts only lenses drawn from that prior. The hidden lenses are not (their arc S/N is
log-uniform), so the prediction conditions on what decides detection: a logistic model of the
detection probability in the features of :data:`FEATURES` (log10 of the arc's r-band matched-filter
S/N, ``lensing.render.arc_snr``; θ_E [arcsec]; the lens's dereddened z magnitude [AB]), fitted by
scikit-learn's ``LogisticRegression`` on the valid injections (detected: score above the threshold),
one model per threshold (a selection function belongs to its threshold: the search's strictest
usable one selects the candidates, a looser one recovers more lenses and so tests the model with
more of them). Its uncertainty comes from refits on bootstrap resamples of the injections' hosts (a
host's injections share their outcome), stored beside the central fit.

Closure: per θ_E bin of the grid (and ``bin = 'all'``), ``n_predicted`` = Σ p_i over the hidden
lenses, ``n_recovered`` the number whose host scores above the threshold, ``n_predicted_sd`` =
√(var_bootstrap(Σ p) + Σ p_i (1 − p_i)) (the model's and the binomial sampling's), and
``pull`` = (n_recovered − n_predicted) / n_predicted_sd.

The model is measured over the injection prior, so it predicts the lenses inside the prior's support
only. The hidden lenses are drawn from the mock's own populations, which may reach beyond it (a
more compact source, a source outside the caustic): ``bin = 'in_prior_support'`` repeats the test on
the hidden lenses whose every parameter of :data:`SUPPORT_PARAMETERS` lies inside the prior's range,
and :func:`outside_prior_support` says which parameter takes each of the others out — the axis a
failing closure misses.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..seeding import rng_for

#: Model features (in this order after the intercept) and how each is made from the raw columns.
FEATURES = ("log_snr", "log_snr^2", "theta_e", "theta_e^2", "log_snr*theta_e", "lens_mag_z")
#: Raw columns the model is evaluated at.
PARAMETERS = ("arc_snr", "theta_e_arcsec", "lens_mag_z")
#: Arc S/N floor before the log (a faint arc's S/N can be ~0).
SNR_FLOOR = 0.3
#: Bootstrap refits over hosts.
N_BOOTSTRAP = 40
#: Reference lens z magnitude the feature is centred on (AB).
MAG_PIVOT = 18.5
#: Injection-prior parameter (``lensing.priors``) of each hidden-lens truth quantity whose range the
#: closure's prior-support row checks; ``src_beta_frac`` is |source position| / θ_E and ``src_q``
#: the source axis ratio (1 − |e|) / (1 + |e|) of its ellipticity (e1, e2).
SUPPORT_PARAMETERS = {
    "src_r_sersic_arcsec": "source_r_sersic_arcsec",
    "src_n_sersic": "source_n_sersic",
    "src_beta_frac": None,
    "src_q": None,
    "src_g_minus_r": "g_minus_r",
    "src_r_minus_z": "r_minus_z",
    "z_s": "z_source",
    "z_l": "z_lens",
}

SELECTION_MODEL_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("threshold", pa.float64(), nullable=False),
        pa.field("replica", pa.int32(), nullable=False, metadata={"description": "0: fit to all; k>0: bootstrap"}),
        pa.field("intercept", pa.float64(), nullable=False),
        *(pa.field(f"coef_{f}", pa.float64(), nullable=False) for f in FEATURES),
        pa.field("n_injections", pa.int64(), nullable=False),
        pa.field("n_hosts", pa.int64(), nullable=False),
    ]
)

CLOSURE_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("bin", pa.string(), nullable=False, metadata={"description": "θ_E bin [lo, hi) or 'all'"}),
        pa.field("theta_e_lo", pa.float64()),
        pa.field("theta_e_hi", pa.float64()),
        pa.field("n_hidden", pa.int64(), nullable=False),
        pa.field("n_predicted", pa.float64(), nullable=False),
        pa.field("n_predicted_sd", pa.float64(), nullable=False),
        pa.field("n_recovered", pa.int64(), nullable=False),
        pa.field("pull", pa.float64(), metadata={"description": "(n_recovered - n_predicted) / n_predicted_sd"}),
    ]
)


def design_matrix(arc_snr, theta_e, lens_mag_z) -> np.ndarray:
    """(N, len(FEATURES)) features of raw parameters (arc S/N, θ_E [arcsec], lens z mag [AB])."""
    s = np.log10(np.maximum(np.asarray(arc_snr, dtype=np.float64), SNR_FLOOR))
    t = np.asarray(theta_e, dtype=np.float64)
    m = np.asarray(lens_mag_z, dtype=np.float64) - MAG_PIVOT
    x = np.stack([s, s**2, t, t**2, s * t, m], axis=1)
    if not np.all(np.isfinite(x)):
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        raise InputError(f"selection model parameters not finite at rows {bad[:5].tolist()}")
    return x


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    from sklearn.linear_model import LogisticRegression

    if y.min() == y.max():
        raise InputError("the injections are all detected or all missed: no detection model can be fitted")
    model = LogisticRegression(C=1e4, max_iter=2000).fit(x, y)
    return float(model.intercept_[0]), model.coef_[0].astype(np.float64)


def fit_selection_model(
    injections: pa.Table, threshold_name: str, threshold: float, n_bootstrap: int = N_BOOTSTRAP, seed: int = 0
) -> pa.Table:
    """SELECTION_MODEL_SCHEMA rows: the fit on every valid injection (replica 0) and ``n_bootstrap``
    refits on host-bootstrap resamples (``rng_for('selection-model', seed, k)``). ``injections``:
    scored injection rows with PARAMETERS, ``score``, ``valid``, ``host_object_id``."""
    missing = [c for c in (*PARAMETERS, "score", "valid", "host_object_id") if c not in injections.column_names]
    if missing:
        raise InputError(f"injection scores lack {missing} for the selection model")
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    rows = injections.filter(pa.array(valid))
    x = design_matrix(*(rows.column(c).to_numpy(zero_copy_only=False) for c in PARAMETERS))
    y = (np.asarray(rows.column("score").to_numpy(zero_copy_only=False), dtype=np.float64) > threshold).astype(int)
    _, host = np.unique(np.asarray(rows.column("host_object_id").to_numpy()), return_inverse=True)
    n_hosts = int(host.max()) + 1 if host.size else 0
    members = [np.flatnonzero(host == h) for h in range(n_hosts)]
    out = []
    for k in range(n_bootstrap + 1):
        if k == 0:
            idx = np.arange(len(y))
        else:
            pick = rng_for("selection-model", seed, k).integers(0, n_hosts, n_hosts)
            idx = np.concatenate([members[h] for h in pick])
        b0, b = _fit(x[idx], y[idx])
        out.append((k, b0, b))
    cols = {
        "threshold_name": [threshold_name] * len(out),
        "threshold": [float(threshold)] * len(out),
        "replica": [k for k, _, _ in out],
        "intercept": [b0 for _, b0, _ in out],
    }
    for i, f in enumerate(FEATURES):
        cols[f"coef_{f}"] = [float(b[i]) for _, _, b in out]
    cols["n_injections"] = [len(y)] * len(out)
    cols["n_hosts"] = [n_hosts] * len(out)
    return pa.table(cols, schema=SELECTION_MODEL_SCHEMA)


def fit_selection_models(
    injections: pa.Table, thresholds, n_bootstrap: int = N_BOOTSTRAP, seed: int = 0
) -> tuple[pa.Table, dict[str, str]]:
    """(SELECTION_MODEL_SCHEMA rows of every threshold that can be fitted, {threshold name: why it
    was not}): :func:`fit_selection_model` per (name, score threshold) of ``thresholds``. A threshold
    that no valid injection passes, or that every one passes, has no detection model: it is left out
    and named, not fitted."""
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    scores = np.asarray(injections.column("score").to_numpy(zero_copy_only=False), dtype=np.float64)[valid]
    tables, skipped = [], {}
    for name, value in thresholds:
        n_detected = int(np.sum(scores > value))
        if n_detected in (0, scores.size):
            skipped[name] = f"{n_detected} of {scores.size} valid injections above {value:.6g}: nothing to fit"
            continue
        tables.append(fit_selection_model(injections, name, value, n_bootstrap, seed))
    if not tables:
        raise InputError(f"no threshold has a detection model: {skipped}")
    return pa.concat_tables(tables), skipped


def threshold_names(model: pa.Table) -> list[str]:
    """The thresholds of ``selection_model`` rows, strictest (highest score threshold) first."""
    pairs = set(zip(model.column("threshold_name").to_pylist(), model.column("threshold").to_pylist()))
    return [name for name, _ in sorted(pairs, key=lambda nv: -nv[1])]


def model_at(model: pa.Table, threshold_name: str) -> pa.Table:
    """The ``selection_model`` rows of one threshold."""
    rows = model.filter(pc.equal(model.column("threshold_name"), threshold_name))
    if rows.num_rows == 0:
        raise InputError(f"selection model has no threshold {threshold_name!r} (it has {threshold_names(model)})")
    return rows


def _one_threshold(model: pa.Table) -> None:
    # a count, not the names: detection_probability runs this in the forecast's loops
    if pc.count_distinct(model.column("threshold_name")).as_py() != 1:
        names = threshold_names(model)
        raise InputError(f"selection model rows of {len(names)} thresholds {names}: choose one with model_at")


def detection_probability(model: pa.Table, arc_snr, theta_e, lens_mag_z, replica: int = 0) -> np.ndarray:
    """P(detected) at the given parameters (arc S/N, θ_E [arcsec], lens z mag [AB]) from the
    ``selection_model`` rows of one threshold (:func:`model_at`; ``replica`` 0: the central fit)."""
    _one_threshold(model)
    reps = model.column("replica").to_pylist()
    if replica not in reps:
        raise InputError(f"selection model has no replica {replica} (replicas {sorted(set(reps))[:5]}…)")
    row = model.slice(reps.index(replica), 1).to_pylist()[0]
    b = np.array([row[f"coef_{f}"] for f in FEATURES])
    z = row["intercept"] + design_matrix(arc_snr, theta_e, lens_mag_z) @ b
    return 1.0 / (1.0 + np.exp(-z))


def calibration_table(model: pa.Table, injections: pa.Table, edges=(0, 2, 5, 10, 20, 50, np.inf)) -> pa.Table:
    """The model (one threshold's rows) against the injections it was fitted on, by arc S/N bin:
    observed and predicted detected counts (a fit that is not calibrated shows here)."""
    _one_threshold(model)
    thr = float(model.column("threshold")[0].as_py())
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    rows = injections.filter(pa.array(valid))
    snr, te, mag = (rows.column(c).to_numpy(zero_copy_only=False) for c in PARAMETERS)
    p = detection_probability(model, snr, te, mag)
    det = np.asarray(rows.column("score").to_numpy(zero_copy_only=False), dtype=np.float64) > thr
    e = np.asarray(edges, dtype=np.float64)
    b = np.clip(np.searchsorted(e, snr, side="right") - 1, 0, len(e) - 2)
    return pa.table(
        {
            "snr_lo": e[:-1],
            "snr_hi": e[1:],
            "n": np.bincount(b, minlength=len(e) - 1).astype(np.int64),
            "n_detected": np.bincount(b, weights=det, minlength=len(e) - 1),
            "n_predicted": np.bincount(b, weights=p, minlength=len(e) - 1),
        }
    )


def _support_values(hidden: pa.Table, parameter: str) -> np.ndarray:
    def col(name: str) -> np.ndarray:
        return np.asarray(hidden.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)

    if parameter == "src_beta_frac":
        return np.hypot(col("source_x_arcsec"), col("source_y_arcsec")) / col("theta_e_arcsec")
    if parameter == "src_q":
        e = np.hypot(col("source_e1"), col("source_e2"))
        return (1.0 - e) / (1.0 + e)
    return col(SUPPORT_PARAMETERS[parameter])


def outside_prior_support(hidden: pa.Table, priors: dict) -> dict[str, np.ndarray]:
    """{prior parameter: (N,) bool, the hidden lens lies outside that prior's [lo, hi]} for each
    parameter of :data:`SUPPORT_PARAMETERS`. ``priors``: the injection plan's recorded priors
    ({name: [kind, lo, hi, mu, sigma]}, ``lensing.bank`` conditioning)."""
    missing = sorted(set(SUPPORT_PARAMETERS) - set(priors))
    if missing:
        raise InputError(f"the injection plan's priors lack {missing}: the prior support cannot be checked")
    out = {}
    for parameter in SUPPORT_PARAMETERS:
        lo, hi = float(priors[parameter][1]), float(priors[parameter][2])
        v = _support_values(hidden, parameter)
        out[parameter] = ~((v >= lo) & (v <= hi))
    return out


def theta_e_edges(theta_e_values) -> np.ndarray:
    """Bin edges [arcsec] around the grid's θ_E centres: the midpoints, the outer ones half a step out."""
    c = np.sort(np.asarray(theta_e_values, dtype=np.float64))
    step = float(np.min(np.diff(c))) if c.size > 1 else 0.5
    return np.r_[c[0] - step / 2, 0.5 * (c[:-1] + c[1:]), c[-1] + step / 2]


def closure_table(
    model: pa.Table, hidden: pa.Table, recovered: np.ndarray, theta_e_values, in_support: np.ndarray
) -> pa.Table:
    """CLOSURE_SCHEMA rows per θ_E bin (centres ``theta_e_values``, edges at the midpoints, the
    outer ones half a step out), 'all' and 'in_prior_support', for the model's one threshold
    (:func:`model_at`). ``hidden``: the hidden lenses (PARAMETERS); ``recovered``: whether each
    one's host scored above that threshold; ``in_support``: whether each lies inside the injection
    prior's support (no parameter of :func:`outside_prior_support` outside)."""
    _one_threshold(model)
    name = model.column("threshold_name")[0].as_py()
    snr, te, mag = (np.asarray(hidden.column(c).to_numpy(zero_copy_only=False), np.float64) for c in PARAMETERS)
    reps = sorted(set(model.column("replica").to_pylist()))
    p = np.stack([detection_probability(model, snr, te, mag, r) for r in reps])  # (replicas, N)
    edges = theta_e_edges(theta_e_values)
    c = edges[:-1]
    b = np.searchsorted(edges, te, side="right") - 1
    recovered = np.asarray(recovered, dtype=bool)
    cols = {f.name: [] for f in CLOSURE_SCHEMA}
    groups = [(f"[{edges[i]:g}, {edges[i + 1]:g})", edges[i], edges[i + 1], b == i) for i in range(len(c))]
    groups.append(("all", None, None, np.ones(len(te), dtype=bool)))
    groups.append(("in_prior_support", None, None, np.asarray(in_support, dtype=bool)))
    for label, lo, hi, sel in groups:
        central = float(p[0, sel].sum())
        boot = p[1:, sel].sum(axis=1) if p.shape[0] > 1 else np.zeros(1)
        sd = float(np.sqrt(np.var(boot) + np.sum(p[0, sel] * (1 - p[0, sel]))))
        k = int(recovered[sel].sum())
        for key, v in (
            ("threshold_name", name),
            ("bin", label),
            ("theta_e_lo", lo),
            ("theta_e_hi", hi),
            ("n_hidden", int(sel.sum())),
            ("n_predicted", central),
            ("n_predicted_sd", sd),
            ("n_recovered", k),
            ("pull", (k - central) / sd if sd > 0 else None),
        ):
            cols[key].append(v)
    return pa.table(cols, schema=CLOSURE_SCHEMA)
