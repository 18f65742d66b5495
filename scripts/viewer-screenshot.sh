#!/bin/sh
# Regenerate docs/viewer.png, the README's picture of `metrobench view`: the browser test
# (tests/test_viewer.py::test_in_headless_chromium) takes it in headless Chromium of the
# side-by-side page it has just checked (the rule agent and a copy with an injected answer).
# Needs /usr/bin/chromium (Debian package) and the benchmark data ($METROBENCH_DATA or
# ../shared/metrollm-bench). PYTHON defaults to the Makefile's .venv.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
METROBENCH_VIEWER_SCREENSHOT=docs/viewer.png "$PYTHON" -m pytest -q -p no:cacheprovider \
  tests/test_viewer.py::test_in_headless_chromium
ls -l docs/viewer.png
