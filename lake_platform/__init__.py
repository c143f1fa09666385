"""The lakehouse platform: lake storage (a local folder or S3), staging and write–audit–publish,
table contracts and audits, the read-only query, and alert delivery with its log.

It knows nothing of Dagster and nothing of lenses: the tables it stores are declared in
``table_registry``; the Dagster layer drives it."""
