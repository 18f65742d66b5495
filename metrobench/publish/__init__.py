"""``metrobench publish``: a trained student assembled as the paper published its students, and pushed.

:mod:`metrobench.publish.bundle` gathers the figures from the study's own files (Table 4 and
8's CSVs, the scores, the run records, the training and export records, the lock) and writes
the folder; :mod:`metrobench.publish.card` renders its model card from those figures only;
:mod:`metrobench.publish.push` uploads the folder in one commit.
"""
