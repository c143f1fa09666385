"""A scored injection bank and its plan, written into a test lake as the injection stage publishes
them: ``injection_scores`` (one batch) and an ``injection_plan`` whose metadata records the grid and
the broad proposal."""

from __future__ import annotations

import json

import pyarrow as pa

from darkhaloscope.lensing.bank import PLAN_SUMMARY_KEY, with_conditioning
from darkhaloscope.lensing.priors import PROPOSALS


def write_injection_bank(lake, bank: pa.Table, theta_e: list[float], z_l: list[float], batch: str) -> None:
    """``bank`` (scored injections with the detection model's PARAMETERS) as batch ``batch`` of
    ``injection_scores``, and a plan on the (``theta_e`` [arcsec], ``z_l``) grid under the broad proposal."""
    lake.write_table("evaluation", "injection_scores", bank, partition={"injection_batch": batch})
    summary = {"theta_e_values": theta_e, "z_l_values": z_l}
    priors = {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in PROPOSALS["broad"].priors.items()}
    plan = pa.table({"injection_id": [0]}).replace_schema_metadata({PLAN_SUMMARY_KEY: json.dumps(summary).encode()})
    lake.write_table("injection", "injection_plan", with_conditioning(plan, {"priors": priors, "proposal": "broad"}))
