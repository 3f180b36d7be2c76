"""A hostile checkpoint's payload, for tests that prove loading a checkpoint runs no code."""

from __future__ import annotations

import os


class PicklePayload:
    """What a hostile checkpoint carries: unpickling it runs ``touch marker``, so a test can
    put it into a checkpoint file and check that loading the file ran nothing."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)
