"""netdoctor single-file build: python3 netdoctor.pyz check ...

The first thing any interpreter runs from the archive, so it holds only syntax every
Python parses (2.7 included: no f-strings, no annotations): an interpreter too old gets
one line and exit 3 (netdoctor's "could not judge") instead of a SyntaxError from deep
inside the code. Everything else is in _netdoctor_pyz, imported once the check passed.
"""
import sys

MINIMUM = (3, 10)
BUILD_ID = "@BUILD_ID@"

if tuple(sys.version_info[:2]) < MINIMUM:
    sys.stderr.write("netdoctor: error: needs Python >= %d.%d, this is %s\n"
                     % (MINIMUM[0], MINIMUM[1], ".".join(str(part) for part in sys.version_info[:3])))
    sys.exit(3)

import _netdoctor_pyz  # noqa: E402  (only once the interpreter is known to parse it)

_netdoctor_pyz.run(BUILD_ID)
