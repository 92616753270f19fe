"""Lambda entry point of the heartbeat function; the code lives in the srm layer."""

from srm.handlers.heartbeat import lambda_handler

__all__ = ["lambda_handler"]
