"""`python -m specviz walk ...`: the headless walk-through (see specviz/cli.py)."""

import sys

from .cli import main

sys.exit(main())
