"""``srm-control``'s use cases: filter and flow edits, status, failover offsets."""
