#!/bin/sh
# Regenerate docs/calibrate.png, docs/viewer.md's picture of the rating page (calibrate.html):
# the browser test (tests/test_calibration.py, the headless Chromium one) takes it after rating
# three pairs of the published sample and stepping back to the third.
# Needs /usr/bin/chromium (Debian package) and the benchmark data ($METROBENCH_DATA or
# ../shared/metrollm-bench). PYTHON defaults to the Makefile's .venv.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
METROBENCH_CALIBRATE_SCREENSHOT=docs/calibrate.png "$PYTHON" -m pytest -q -p no:cacheprovider \
  tests/test_calibration.py::test_rating_three_pairs_in_headless_chromium_downloads_them_as_the_csv_table1_reads
ls -l docs/calibrate.png
