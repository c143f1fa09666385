"""Dagster resources of the lakehouse, configured from the environment (see README)."""

from .compute import ComputeResource
from .config import build_resources
from .lake import LakeResource
from .survey import SurveyResource

__all__ = ["build_resources", "LakeResource", "SurveyResource", "ComputeResource"]
