"""``python -m gitray``: the same as the ``gitray`` command."""

import sys

from gitray.cli import main

sys.exit(main())
