"""Pure decisions: filters, the identity loop guard, offset runs, checkpoints, topic and mapping plans, events.
Nothing here does I/O or imports a client library; all of it is unit-tested in milliseconds."""
