"""`python -m vmio` is the `vmio` command."""

import sys

from vmio.cli import main

sys.exit(main())
