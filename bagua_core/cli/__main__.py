"""``python -m bagua_core.cli`` is the ``bagua`` command."""

import sys

from bagua_core.cli import main

sys.exit(main())
