"""Lambda entry point of the checkpoint function; the code lives in the srm layer."""

from srm.handlers.checkpoint import lambda_handler

__all__ = ["lambda_handler"]
