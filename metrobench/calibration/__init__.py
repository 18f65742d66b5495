"""Table 1, the judge's calibration: the sample of case-rubric pairs, its raters and the agreement table.

:mod:`~metrobench.calibration.sample` makes or loads the sample (the published blind file, or a
stratified draw from a model's scored runs), :mod:`~metrobench.calibration.judging` has the
configured judges rate it, :mod:`~metrobench.calibration.table` reads people's ratings and builds
Table 1 from every pair of raters.
"""
