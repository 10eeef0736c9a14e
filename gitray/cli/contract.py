"""The command line's public contract shared by the parser and the commands: exit codes and
output formats. No logic, no I/O.

Exit codes: 0 success / no changes, 1 error, 2 changes present (only with
``--detailed-exitcode``).
"""

from __future__ import annotations

__all__ = ["EXIT_CHANGES", "EXIT_ERROR", "EXIT_OK", "FORMATS", "REPORT_FORMATS"]

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
FORMATS = ("text", "markdown", "json")  # gitray.plans.render.Format (checked by a unit test)
# where reviewers look: gitray.plans.annotations.ReportFormat (checked by a unit test)
REPORT_FORMATS = ("github", "codeclimate", "sarif")
