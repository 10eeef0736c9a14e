"""The Kubernetes API: the one module that imports the client (``client``), live state, leader
election (``election`` rules, ``lease`` calls and threads) and Events. Does I/O. Imports only
``core``.
"""
