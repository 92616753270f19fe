"""MM2's contract: replication policies, the wire formats of heartbeats, checkpoints and offset syncs, and the
RemoteClusterUtils-like client (:mod:`srm.mm2.client`)."""
