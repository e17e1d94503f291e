"""`python -m specdeploy.cli`: what the `specdeploy` script runs."""

import sys

from specdeploy.cli.entry import main

sys.exit(main())
