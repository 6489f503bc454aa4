"""``python -m exactly``: the ``exactly`` command, for when the console script is not on PATH."""

import sys

from exactly.app.cli.main import main

sys.exit(main())
