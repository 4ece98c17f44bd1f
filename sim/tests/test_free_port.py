"""tfjob_sim.testing.processes.free_port: a port a process binds seconds later must still be free then."""

from __future__ import annotations

import socket
from pathlib import Path

from tfjob_sim.testing.processes import free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    """Below the range the kernel draws connect()'s source ports from, no outgoing connection can take the port
    before its process binds it; and no two calls hand out the same one."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(port < low for port in ports), (low, ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
