#!/bin/sh
# Regenerate the docs' pictures of the two browser pages, each taken by the headless-Chromium
# test that has just checked that page:
#   viewer     docs/viewer.png, the README's picture of `metrobench view` (the side-by-side page
#              of the rule agent and a copy with an injected answer; tests/test_viewer.py)
#   calibrate  docs/calibrate.png, docs/viewer.md's picture of the rating page calibrate.html
#              (three pairs of the published sample rated, then back to the third;
#              tests/test_calibration.py)
# Usage: scripts/screenshots.sh [viewer|calibrate]...  (none: both)
# Needs /usr/bin/chromium (Debian package) and the benchmark data ($METROBENCH_DATA or
# ../shared/metrollm-bench). PYTHON defaults to the Makefile's .venv.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ $# -gt 0 ] || set -- viewer calibrate
for page in "$@"; do
  case $page in
    viewer)
      METROBENCH_VIEWER_SCREENSHOT=docs/viewer.png "$PYTHON" -m pytest -q -p no:cacheprovider \
        tests/test_viewer.py::test_in_headless_chromium ;;
    calibrate)
      METROBENCH_CALIBRATE_SCREENSHOT=docs/calibrate.png "$PYTHON" -m pytest -q -p no:cacheprovider \
        tests/test_calibration.py::test_rating_three_pairs_in_headless_chromium_downloads_them_as_the_csv_table1_reads ;;
    *) echo "scripts/screenshots.sh: unknown page '$page' (viewer or calibrate)" >&2; exit 2 ;;
  esac
  ls -l "docs/$page.png"
done
