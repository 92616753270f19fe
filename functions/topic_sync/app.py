"""Lambda entry point of the topic-sync function; the code lives in the srm layer."""

from srm.handlers.topic_sync import lambda_handler

__all__ = ["lambda_handler"]
