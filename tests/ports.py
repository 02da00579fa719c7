"""Ports for tests that run in parallel (pytest -n): chosen by the OS, and kept from everyone else.

A test that must name a port before a server binds it (a second node's MASTER_PORT, the trainer's metrics
port) cannot hand over port 0. `reserved_port()` asks the OS for a free port, then leaves it in TIME_WAIT
(a connection accepted on it and closed from that side first, the technique of Yelp's
ephemeral-port-reserve): for a minute the OS gives it to no other bind of port 0, while a server that binds
it with SO_REUSEADDR, as torch's TCPStore, http.server and prometheus_client do, takes it at once. Binding
a free port and closing it at once, by contrast, lets a parallel test's server be handed the same port."""

from __future__ import annotations

import socket


def reserved_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, 0))
        server.listen(1)
        address = server.getsockname()
        with socket.create_connection(address):
            accepted, _ = server.accept()
            accepted.close()  # this side closes first, so the port sits in TIME_WAIT
        return address[1]
