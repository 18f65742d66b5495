#!/usr/bin/env bash
# The system packages some tests need, installed when missing and possible:
#   chromium          the case viewer's browser test (tests/test_viewer.py)
#   slurm-wlm, munge  the one-node cluster test (tests/test_slurm.py, as root)
# Called by `make test` and by .ci/run, so a newcomer runs the same suite as CI.
# It never fails: where a package cannot be installed (no root, no apt-get, no
# network) it says in one line how to install it, and those tests skip.
set -uo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  missing+=(slurm-wlm munge)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
      >/dev/null 2>&1; then
    echo "install-test-deps: installed ${missing[*]}"
    exit 0
  fi
fi
echo "install-test-deps: ${missing[*]} not installed, so their tests skip;" \
     "to run them: sudo apt-get install ${missing[*]}"
exit 0
