"""Registers the test environment's pytest plugin (testenv/fixtures.py) for every test of the
repository: tests/, bench/. Here at the root so that its directory is on sys.path however
pytest is started."""

pytest_plugins = ["testenv.fixtures"]
