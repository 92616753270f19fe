"""Command-line interfaces: ``srm`` (run, demo) and ``srm-control``."""
