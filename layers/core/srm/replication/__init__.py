"""The use cases of the four functions, one module each (mirror, checkpoint, heartbeat, topic_sync), and the
event source mapping sync topic sync runs."""
