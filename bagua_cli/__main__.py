"""``python -m bagua_cli`` is the ``bagua`` console script."""

from bagua_cli import program

program()
