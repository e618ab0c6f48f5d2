"""``python -m rstreams`` is the ``rstreams`` command."""

import sys

from rstreams.cli import main

sys.exit(main())
