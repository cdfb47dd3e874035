"""``python -m tether`` is the ``tether`` command."""

from tether.cli import main

raise SystemExit(main())
