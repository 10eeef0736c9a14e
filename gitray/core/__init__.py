"""Values every layer shares: the model, the one exception tree, settings, a repository
snapshot, time formatting, credentials and redaction, and the one wait/retry helper.

No I/O (``waits`` only sleeps, on a clock it is given). Imports no other gitray package.
"""
