"""Lambda entry point of the metrics API function; the code lives in the srm layer."""

from srm.handlers.metrics_api import lambda_handler

__all__ = ["lambda_handler"]
