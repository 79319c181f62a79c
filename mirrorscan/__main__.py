"""``python -m mirrorscan VERB …``: the same command line as the ``mirrorscan`` script."""

import sys

from mirrorscan.jobs.cli import main

sys.exit(main())
