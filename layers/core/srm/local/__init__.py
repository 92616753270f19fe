"""The local runtime: the same handlers, events and state on one machine (``srm run``, ``srm demo``)."""
