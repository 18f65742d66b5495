"""``python -m metrobench.study``: the generated files, or a check of config files."""

import sys

from metrobench.study.generated import main

sys.exit(main())
