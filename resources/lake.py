"""Lake storage resource: a local folder or s3://bucket/prefix (DHS_LAKE, DHS_S3_ENDPOINT)."""


import dagster as dg

from darkhaloscope.lake import Lake


class LakeResource(dg.ConfigurableResource):
    """Where every table lives. ``uri`` is a local folder or ``s3://bucket/prefix``;
    ``s3_endpoint`` overrides the S3 endpoint for any S3-compatible server."""

    uri: str = "./lakehouse"
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_max_attempts: int = 5

    def lake(self) -> Lake:
        return Lake(self.uri, s3_endpoint=self.s3_endpoint, s3_region=self.s3_region, s3_max_attempts=self.s3_max_attempts)
