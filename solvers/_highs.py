"""One process-wide fact about HiGHS that every solver using it needs: its banner."""
from __future__ import annotations

import os
import sys

import highspy

_BANNER_DONE = False


def silence_highs_banner() -> None:
    """HiGHS prints a two-line banner on the C stdout the first time a solver object is made
    in a process, before any option can turn output off; it would corrupt
    a JSON document printed on stdout.  Make that first object with file descriptor 1 pointed at
    /dev/null."""
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _BANNER_DONE = True
