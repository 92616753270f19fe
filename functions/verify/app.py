"""Lambda entry point of the verify function; the code lives in the srm layer."""

from srm.handlers.verify import lambda_handler

__all__ = ["lambda_handler"]
