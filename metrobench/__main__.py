import sys

from metrobench.cli import main

sys.exit(main())
