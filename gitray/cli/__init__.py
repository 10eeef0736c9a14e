"""The ``gitray`` command line: argument parsing, the commands, console output, the status
table. Importing this package loads only the parser: each command imports what it needs
(``gitray plan`` never loads the daemon, nor the Kubernetes client unless ``--against live``).
"""

from gitray.cli.app import main

__all__ = ["main"]
