"""``python -m dsh``: the same as the ``dsh`` command."""

from dsh.cli import main

raise SystemExit(main())
