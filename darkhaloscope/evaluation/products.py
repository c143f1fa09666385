"""The evaluation's products: the selection function with its marginals and figures, and the
inputs of the HTML report, assembled from score tables (no lake or orchestration here).
"""

from __future__ import annotations

import json
from typing import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..lensing.bank import table_conditioning
from .comparison import auroc_intervals, model_comparison
from .plots import ablation_png, marginal_png, mosaic_png, reliability_png, roc_inputs, roc_png, selection_heatmap_png
from .report import ablation_page, build_report, example_ids
from .selection import marginal_completeness, selection_function
from .thresholds import usable_thresholds

#: Marginal completeness: column -> (axis label, bin edges).
MARGINALS = {
    "psf_fwhm_r": ("PSF FWHM r [arcsec]", [0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.2]),
    "depth_mag_r": ("5σ depth r [AB]", [22.5, 23.0, 23.5, 24.0, 24.5, 25.0]),
    "src_mag_r": ("source r (unlensed) [AB]", [22.0, 23.0, 24.0, 25.0, 26.0]),
    "lens_mag_z": ("lens z (the host's, dereddened) [AB]", [15.0, 17.0, 18.0, 18.5, 19.0, 19.5, 20.0, 21.0]),
    "lensed_mag_r": ("lensed r [AB]", [18.0, 20.0, 21.0, 22.0, 23.0, 24.0, 26.0]),
    "arc_snr": ("arc S/N (r, matched filter)", [0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 1e6]),
}
#: Sub-folder of the selection function's table holding its figures.
FIGURES = {"artifact": "figures"}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def heatmap_file(threshold_name: str) -> str:
    return f"heatmap_{_safe(threshold_name)}.png"


def marginal_file(by: str) -> str:
    return f"marginal_{by}.png"


def selection_products(
    injections: pa.Table, thresholds: pa.Table, theta_e_values, z_l_values, insufficient_cells=()
) -> tuple[pa.Table, pa.Table, dict[str, bytes]]:
    """(C(θ_E, z_l) on the plan's grid with ``theta_e_arcsec``/``z_l`` columns, the marginal
    completeness table, {figure file name: PNG}) for every usable threshold. ``insufficient_cells``:
    (θ_E, z_l) cells the plan could not fill with hosts of their redshift (``plan_summary``), flagged
    ``sufficient = False`` whatever their count."""
    sel = selection_function(injections, thresholds, theta_e_centres=list(theta_e_values), z_l_centres=list(z_l_values))
    if len(insufficient_cells):
        bad = {(round(float(t), 6), round(float(z), 6)) for t, z in insufficient_cells}
        cells = zip(sel.column("theta_e_centre").to_pylist(), sel.column("z_l_centre").to_pylist())
        flag = [(round(t, 6), round(z, 6)) not in bad for t, z in cells]
        sufficient = pc.and_(sel.column("sufficient"), pa.array(flag))
        sel = sel.set_column(sel.schema.get_field_index("sufficient"), "sufficient", sufficient)
    sel = sel.append_column("theta_e_arcsec", sel.column("theta_e_centre")).append_column(
        "z_l", sel.column("z_l_centre")
    )
    figures = {heatmap_file(name): selection_heatmap_png(sel, name) for name, _ in usable_thresholds(thresholds)}
    marginals = []
    for by, (label, edges) in MARGINALS.items():
        m = marginal_completeness(injections, thresholds, by, edges)
        figures[marginal_file(by)] = marginal_png(m, label)
        marginals.append(m)
    return sel, pa.concat_tables(marginals, promote_options="permissive"), figures


def report_gates(lens_finder_row: Mapping) -> list[dict]:
    """The lens finder's gates (name, value, threshold, passed) from its registry row's metrics."""
    metrics = json.loads(lens_finder_row["metrics"])
    gates = metrics.get("gates", [])
    gates = json.loads(gates) if isinstance(gates, str) else gates
    return [
        {k: g[k] for k in ("name", "value", "threshold", "passed")}
        for g in gates
        if isinstance(g, dict) and g.get("value") is not None
    ]


def _mosaics(usable, injections, held_out, cutout_stamps, injection_stamps) -> dict[str, bytes]:
    """{caption: PNG} of example stamps at the first usable threshold: true positives and missed
    injections from the bank, the highest-scoring held-out negatives from the cutouts."""
    mosaics = {}
    if usable:
        name, value = usable[0]
        ex = example_ids(injections, held_out, value)
        bank = injection_stamps(ex.get("true positives", []) + ex.get("missed injections", []))
        for caption, ids in ex.items():
            if ids:
                stamps = (
                    cutout_stamps(ids) if caption == "highest-scoring negatives" else np.stack([bank[i] for i in ids])
                )
                mosaics[f"{caption} ({name})"] = mosaic_png(stamps, [str(i) for i in ids])
    return mosaics


def report_html(
    *,
    thresholds: pa.Table,
    selection: pa.Table,
    marginals: pa.Table,
    figure: Callable[[str], bytes],
    recall: pa.Table,
    fpr: pa.Table,
    injections: pa.Table,
    controls: pa.Table,
    held_out: pa.Table,
    real_test: pa.Table,
    cutout_stamps: Callable[[list], np.ndarray],
    injection_stamps: Callable[[list], dict],
    lens_finder_row: Mapping,
    lake_uri: str,
    gallery_uri: str | None = None,
    conditioning: Mapping | None = None,
    selection_tables: Mapping[str, pa.Table | None] | None = None,
    realism: pa.Table | None = None,
    ablation_uri: str | None = None,
) -> str:
    """The evaluation report page. ``figure(name)`` returns a stored figure; ``cutout_stamps(ids)``
    the cutouts' images (N, 3, 101, 101); ``injection_stamps(ids)`` {injection id: image};
    ``gallery_uri`` where the search's candidate gallery is published; ``conditioning`` what the
    selection function is conditioned on (``lensing.bank.selection_conditioning``);
    ``selection_tables`` the tables that test and extend it, by table name (see :func:`build_report`;
    ``lens_forecast`` carries its assumptions in its schema, ``lensing.bank.table_conditioning``);
    ``realism`` the realism probe's table (:mod:`realism`); ``ablation_uri`` where the realism
    ablation's page is published."""
    usable = usable_thresholds(thresholds)
    forecast = (selection_tables or {}).get("lens_forecast")
    curves = {
        "injections vs paired controls": roc_inputs(injections, controls),
        "test-split known lenses vs held-out negatives": roc_inputs(real_test, held_out),
    }
    marg = {
        label: (figure(marginal_file(by)), marginals.filter(pc.equal(marginals.column("by"), by)))
        for by, (label, _) in MARGINALS.items()
    }
    mosaics = _mosaics(usable, injections, held_out, cutout_stamps, injection_stamps)
    metrics = json.loads(lens_finder_row["metrics"])
    calibration = metrics.get("calibration") or None
    return build_report(
        roc=roc_png(curves),
        thresholds=thresholds,
        selection=selection,
        selection_heatmaps={name: figure(heatmap_file(name)) for name, _ in usable},
        marginals=marg,
        recall=recall,
        fpr_by_confuser=fpr,
        gates=report_gates(lens_finder_row),
        validation=metrics,
        calibration=calibration,
        reliability=reliability_png(calibration) if calibration else None,
        model_choice=metrics.get("ensemble") or None,
        comparison=model_comparison(injections, controls, real_test, held_out),
        aurocs=auroc_intervals(injections, controls, real_test, held_out),
        mosaics=mosaics,
        provenance={
            "checkpoint": lens_finder_row["checkpoint_uri"],
            "checkpoint version": lens_finder_row["data_version"],
            "lake": lake_uri,
        },
        gallery_uri=gallery_uri,
        conditioning=conditioning,
        selection_tables=selection_tables,
        forecast_assumptions=table_conditioning(forecast) if forecast is not None else None,
        realism=realism,
        ablation_uri=ablation_uri,
    )


def ablation_html(table: pa.Table) -> str:
    """The realism ablation's page (:func:`report.ablation_page`) with its figure drawn from ``table``."""
    return ablation_page(table, ablation_png(table))
