"""``python -m pkb_core`` is the ``pkb`` command."""
from pkb_core.cli.main import main

main()
