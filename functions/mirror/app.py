"""Lambda entry point of the mirror function; the code lives in the srm layer."""

from srm.handlers.mirror import lambda_handler

__all__ = ["lambda_handler"]
