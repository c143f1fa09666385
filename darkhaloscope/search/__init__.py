"""Survey-wide lens search: every preselected galaxy cut and scored in a stream, a ranked candidate
catalog, an inspection gallery and visual grades.

- :mod:`.targets`: the galaxies the search covers (the negative pools' cuts before the known-lens
  exclusion and before any sampling), in brick order.
- :mod:`.streaming`: cut stamps from an image source chunk by chunk and score them as they come,
  keeping only the stamps of high-scoring rows.
- :mod:`.launch`: one process's share of a sweep file's search (the asset's process, a Spark task or
  a Pipes subprocess): load the published lens finder, open the image source from its settings,
  score and commit its chunks.
- :mod:`.spark`: a sweep file's chunks as Spark tasks of brick groups.
- :mod:`.candidates`: rows above a threshold, ranked, cross-matched to the known lenses,
  de-duplicated, with their rank percentile and the search's completeness.
- :mod:`.gallery`: one static HTML page of colour stamps with a grading control.
- :mod:`.grades`: validation of a grades CSV, the rounds of the ``visual_grades`` table and the
  grades the next training set uses.
"""
