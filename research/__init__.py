"""Research: diagnostics and bounds that informed a design choice of the lens finder, each a script
run from the repository root as ``python -m research.<name>`` on a materialized lake; their results
are the research notes of ``docs/research/`` (``research/README.md`` lists which). Never imported by the product or
its tests; its own tests are ``research/tests`` (``python -m pytest research/tests``).
"""
