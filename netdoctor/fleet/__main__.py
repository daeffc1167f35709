"""`python -m netdoctor.fleet`: the fleet commands alone (the zipapp and tests use `netdoctor fleet`)."""

import sys

from netdoctor.fleet.cli import main

sys.exit(main())
