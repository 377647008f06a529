"""``python -m bagua_cli`` is the ``bagua`` console script."""

import sys

from bagua_cli import main

sys.exit(main())
