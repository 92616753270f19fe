"""Ports for the servers ``srm run`` and the suite start: free, and out of the way of outgoing connections."""

from __future__ import annotations

import socket

from srm.local.store import _ephemeral_ports_start, free_port


def test_free_ports_are_bindable_and_below_the_ephemeral_range():
    # an outgoing connection takes its local port from the ephemeral range: a port picked there could be taken
    # between the pick and the server's bind
    ports = {free_port() for _ in range(50)}
    assert all(10_000 <= port < _ephemeral_ports_start() for port in ports)
    assert len(ports) > 40  # picked at random, not one port over and over
    for port in list(ports)[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
