"""The process runtime's pod network and cluster DNS (tfjob_sim.process.network, .dns), for real.

Every test that builds a network needs root (namespaces, veth pairs), as the runtime does; the
programs "in a pod" are Python one-liners entered into the pod's network namespace with
``nsenter --net=`` and given a private mount namespace (``unshare --mount``) in which the pod's
resolv.conf and hosts are bind-mounted over /etc's, the way the runtime starts containers. Names
are resolved with getaddrinfo, as gRPC's native resolver does, so the search list and ndots of the
pod's resolv.conf are exercised, not bypassed. Traffic goes only to addresses inside the
namespaces the network creates.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import anyio
import pytest
from dnslib import EDNS0, QTYPE, RCODE, DNSRecord

from tfjob_sim.process import janitor
from tfjob_sim.process.dns import ClusterDNS
from tfjob_sim.process.network import (
    PodNetwork,
    PodNetworkError,
    PodNetworkUnavailable,
    Sandbox,
    _Addresses,
    hosts_file,
    resolv_conf,
)
from tfjob_sim.store import Store
from tfjob_sim.testing.leftovers import host_network_snapshot, leftovers
from tfjob_sim.testing.waiting import eventually

# ---------------------------------------------------------------- helpers


def _read(*path: str) -> str:
    with open(os.path.join(*path)) as f:
        return f.read()


def _exists(path: str) -> bool:
    return os.path.exists(path)


# Inside the pod's network namespace, a private mount namespace with the pod's files over /etc's.
_MOUNT_ETC = (
    'mount --bind "$1/resolv.conf" /etc/resolv.conf && mount --bind "$1/hosts" /etc/hosts && shift && exec "$@"'
)


async def in_pod(sandbox: Sandbox, code: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "nsenter",
        f"--net={sandbox.netns}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _MOUNT_ETC,
        "sh",
        sandbox.etc_dir,
        sys.executable,
        "-I",
        "-S",
        "-c",
        code,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run_in_pod(sandbox: Sandbox, code: str, *args: str, timeout: float = 30.0) -> str:
    proc = await in_pod(sandbox, code, *args)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the program in pod {sandbox.name} did not finish within {timeout} s") from None
    assert proc.returncode == 0, f"program in pod {sandbox.name} failed ({proc.returncode}): {err.decode()}"
    return out.decode()


_RESOLVE = """
import json, socket, sys
out = {}
for name in sys.argv[1:]:
    try:
        infos = socket.getaddrinfo(name, 2222, type=socket.SOCK_STREAM)
        out[name] = sorted({info[4][0] for info in infos})
    except socket.gaierror as exc:
        out[name] = "EAI_NONAME" if exc.errno == socket.EAI_NONAME else f"error {exc.errno}: {exc}"
print(json.dumps(out))
"""


async def resolve_in_pod(sandbox: Sandbox, *names: str) -> dict[str, list[str] | str]:
    return json.loads(await run_in_pod(sandbox, _RESOLVE, *names))


def add_service(store: Store, namespace: str, name: str, selector: dict | None, **spec) -> None:
    store.create(
        "services",
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                **({"selector": selector} if selector is not None else {}),
                "ports": [{"name": "tfjob-port", "port": 2222}],
                **spec,
            },
        },
    )


def add_pod(store: Store, namespace: str, name: str, labels: dict, ip: str | None, ready: bool, **spec) -> dict:
    store.create(
        "pods",
        namespace,
        {"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}},
    )
    return set_pod_status(store, namespace, name, ip, ready)


def set_pod_status(store: Store, namespace: str, name: str, ip: str | None, ready: bool) -> dict:
    status: dict = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status.update(podIP=ip, podIPs=[{"ip": ip}])
    return store.patch("pods", namespace, name, "merge", {"status": status}, subresource="status")


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
async def network(store: Store) -> AsyncIterator[PodNetwork]:
    net = PodNetwork(store=store)
    await net.start()
    try:
        yield net
    finally:
        await net.stop()
        assert leftovers(net.prefix) == []


# ---------------------------------------------------------------- pod network


_SERVE = """
import socket, sys
srv = socket.socket()
srv.bind(("0.0.0.0", 2222))
srv.listen()
print("listening", flush=True)
conn, peer = srv.accept()
conn.sendall(b"hello from " + sys.argv[1].encode())
print(peer[0], flush=True)
"""

_CONNECT = """
import socket, sys
with socket.create_connection((sys.argv[1], 2222), timeout=10) as s:
    print(s.recv(100).decode())
"""


async def test_two_pods_listen_on_the_same_port_and_reach_each_other_by_ip(network: PodNetwork) -> None:
    a = await network.create_sandbox("default", "a", "aaaaaaaa-0000")
    b = await network.create_sandbox("default", "b", "bbbbbbbb-0000")
    assert a.ip != b.ip and {a.ip, b.ip} <= {f"10.244.0.{i}" for i in range(2, 255)}
    servers = {sb.name: await in_pod(sb, _SERVE, sb.name) for sb in (a, b)}
    for proc in servers.values():
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"listening\n"  # both hold :2222
    assert (await run_in_pod(a, _CONNECT, b.ip)).strip() == f"hello from {b.name}"
    assert (await run_in_pod(b, _CONNECT, a.ip)).strip() == f"hello from {a.name}"
    # Each server saw the other pod's own address: no NAT, real pod IPs.
    peers = {
        name: (await asyncio.wait_for(proc.communicate(), 30))[0].decode().strip() for name, proc in servers.items()
    }
    assert peers == {b.name: a.ip, a.name: b.ip}


async def test_a_pod_has_loopback_its_ip_and_no_route_out(network: PodNetwork) -> None:
    a = await network.create_sandbox("default", "a", "aaaaaaaa-0000")
    code = """
import errno, json, socket, subprocess
out = {"routes": subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout.split("\\n")}
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
socket.create_connection(srv.getsockname(), timeout=5).close()
out["loopback"] = True
for target in ("10.96.0.1", "198.51.100.1"):
    try:
        socket.create_connection((target, 443), timeout=5).close()
        out[target] = "connected"
    except OSError as exc:
        out[target] = errno.errorcode.get(exc.errno, str(exc))
print(json.dumps(out))
"""
    result = json.loads(await run_in_pod(a, code))
    assert [r.split() for r in result["routes"] if r] == [
        ["10.244.0.0/16", "dev", "eth0", "proto", "kernel", "scope", "link", "src", a.ip]
    ]
    assert result["loopback"] is True
    # No default route: a ClusterIP (no kube-proxy) and any address outside the pod CIDR are unreachable
    # at once, before a packet is sent.
    assert {result[t] for t in ("10.96.0.1", "198.51.100.1")} == {"ENETUNREACH"}


async def test_pod_files_are_what_kubelet_writes(network: PodNetwork) -> None:
    plain = await network.create_sandbox("ns1", "p", "cccccccc-1")
    named = await network.create_sandbox("ns1", "job-worker-0", "dddddddd-1", hostname="w0", subdomain="job")
    assert _read(plain.etc_dir, "resolv.conf") == (
        f"search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver {network.dns_ip}\noptions ndots:5\n"
    )
    hosts = _read(plain.etc_dir, "hosts").splitlines()
    assert "127.0.0.1\tlocalhost" in hosts and hosts[-1] == f"{plain.ip}\tp"
    assert _read(named.etc_dir, "hosts").splitlines()[-1] == f"{named.ip}\tw0.job.ns1.svc.cluster.local\tw0"
    # The pod resolves its own names through the hosts file, before any DNS.
    assert await resolve_in_pod(named, "w0", "w0.job.ns1.svc.cluster.local", "localhost") == {
        "w0": [named.ip],
        "w0.job.ns1.svc.cluster.local": [named.ip],
        "localhost": ["127.0.0.1", "::1"],
    }


async def test_remove_sandbox_frees_everything_and_is_idempotent(network: PodNetwork) -> None:
    a = await network.create_sandbox("default", "a", "aaaaaaaa-0000")
    sleeper = await in_pod(a, "import time; time.sleep(600)")
    await eventually(lambda: bool(_pids_in(a.netns)), what="the sleeper to enter its pod")
    await network.remove_sandbox(a)
    await network.remove_sandbox(a)
    assert not _exists(a.netns) and not _exists(a.etc_dir)
    # A process left inside is killed: it would keep the namespace (and the address) alive unseen.
    assert await asyncio.wait_for(sleeper.wait(), 30) != 0
    assert [x for x in leftovers(network.prefix) if a.name in x] == []
    # The same pod uid again gets a fresh sandbox, with a fresh address (released ones come last).
    again = await network.create_sandbox("default", "a", "aaaaaaaa-0000")
    assert again.name == a.name and again.ip != a.ip


def _pids_in(netns: str) -> list[int]:
    return janitor.pids_in_netns(netns)


async def test_two_networks_side_by_side_do_not_collide(store: Store) -> None:
    first, second = PodNetwork(store=store), PodNetwork(store=store)
    await first.start()
    try:
        await second.start()
        try:
            assert first.prefix != second.prefix
            a1 = await first.create_sandbox("default", "a", "aaaaaaaa-0000")
            a2 = await second.create_sandbox("default", "a", "aaaaaaaa-0000")
            # The same address, the same port, in two separate networks.
            assert a1.ip == a2.ip and a1.name != a2.name
            server = await in_pod(a1, _SERVE, "first")
            assert server.stdout is not None
            assert await asyncio.wait_for(server.stdout.readline(), 30) == b"listening\n"
            b2 = await second.create_sandbox("default", "b", "bbbbbbbb-0000")
            refused = "import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], 2222), 10)\nexcept ConnectionRefusedError:\n    print('refused')"
            # From the second network, a1's address is a2, which listens on nothing: refused, never the first's server.
            assert (await run_in_pod(b2, refused, a1.ip)).strip() == "refused"
            server.kill()
            await server.wait()
        finally:
            await second.stop()
    finally:
        await first.stop()
    assert leftovers(first.prefix) == [] and leftovers(second.prefix) == []


async def test_stop_leaves_nothing_and_the_host_namespace_unchanged(store: Store) -> None:
    before = host_network_snapshot()
    net = PodNetwork(store=store)
    await net.start()
    sandboxes = [await net.create_sandbox("default", f"p{i}", f"{i:08d}-x") for i in range(3)]
    sleeper = await in_pod(sandboxes[0], "import time; time.sleep(600)")
    await eventually(lambda: bool(_pids_in(sandboxes[0].netns)), what="the sleeper to enter its pod")
    assert leftovers(net.prefix)  # the helper sees a live network (it can fail)
    assert host_network_snapshot() == before  # nothing was ever added to the host's namespace
    await net.stop()
    await net.stop()  # idempotent
    assert leftovers(net.prefix) == []
    assert await asyncio.wait_for(sleeper.wait(), 30) != 0
    assert host_network_snapshot() == before
    with pytest.raises(PodNetworkError, match="not running"):
        await net.create_sandbox("default", "late", "eeeeeeee-1")


_SIMULATOR = """
import asyncio, sys
from tfjob_sim.store import Store
from tfjob_sim.process.network import PodNetwork

async def main():
    net = PodNetwork(store=Store())
    await net.start()
    sb = await net.create_sandbox("default", "a", "aaaaaaaa-0000")
    print("READY", net.prefix, sb.netns, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_sigkilled_simulator_leaves_nothing_behind() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SIMULATOR, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert proc.stdout is not None
    try:
        line: list[str] = []
        while line[:1] != ["READY"]:  # its log lines come first
            raw = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert raw, "the simulator exited before its network was up"
            line = raw.decode().split()
        _, prefix, netns = line
        assert _exists(netns) and leftovers(prefix)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    # Its janitor child notices the end of its pipe and removes the namespaces and files.
    await eventually(lambda: leftovers(prefix) == [], what=f"the leftovers of {prefix} to disappear")


def _fake_dead_simulator_leftovers() -> str:
    """A named namespace and an /etc/netns dir under the prefix of a simulator whose pid is gone."""
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)  # a process that has exited: its pid is not alive
    assert not janitor.pid_alive(dead_pid)
    stale = f"tfsim{dead_pid}-0"
    subprocess.run(["ip", "netns", "add", f"{stale}-node"], check=True)
    os.makedirs(f"/etc/netns/{stale}-abcdef12", exist_ok=True)
    return stale


async def test_start_sweeps_what_dead_simulators_left(store: Store) -> None:
    stale = _fake_dead_simulator_leftovers()
    try:
        assert len(leftovers(stale)) == 2
        net = PodNetwork(store=store)
        await net.start()
        try:
            assert leftovers(stale) == []
            assert leftovers(net.prefix)  # its own network is not a dead one's
        finally:
            await net.stop()
    finally:
        janitor.cleanup(stale)


async def test_without_root_start_says_so_in_one_line(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    net = PodNetwork(store=store)
    with pytest.raises(PodNetworkUnavailable) as caught:
        await net.start()
    assert str(caught.value) == "the process runtime needs root: pods get their own network namespaces and veth pairs"
    assert leftovers(net.prefix) == []
    await net.stop()  # nothing to stop: fine


# ---------------------------------------------------------------- cluster DNS, through a pod's resolver


async def test_a_pod_resolves_headless_services_to_ready_pod_ips(network: PodNetwork, store: Store) -> None:
    worker = await network.create_sandbox("default", "job-worker-0", "11111111-0")
    ps = await network.create_sandbox("default", "job-ps-0", "22222222-0")
    client = await network.create_sandbox("default", "client", "44444444-0")
    other = await network.create_sandbox("team", "x", "33333333-0")
    add_service(store, "default", "job-worker-0", {"job": "j", "idx": "0"}, clusterIP="None")
    add_service(store, "default", "job-ps-0", {"job": "j", "ps": "0"}, clusterIP="None")
    add_pod(store, "default", "job-worker-0", {"job": "j", "idx": "0"}, worker.ip, ready=True)
    add_pod(store, "default", "job-ps-0", {"job": "j", "ps": "0"}, ps.ip, ready=False)

    names = ("job-worker-0", "job-worker-0.default.svc", "job-worker-0.default.svc.cluster.local")
    # (From a third pod: each pod finds its own name in its hosts file, without DNS.)
    got = await resolve_in_pod(client, *names, "job-ps-0", "nosuch", "nosuch.default.svc.cluster.local")
    assert got == {
        **dict.fromkeys(names, [worker.ip]),
        "job-ps-0": "EAI_NONAME",  # its only pod is not Ready
        "nosuch": "EAI_NONAME",
        "nosuch.default.svc.cluster.local": "EAI_NONAME",
    }
    # Another namespace's pod: the short name is not its own; `<svc>.<ns>` goes through `svc.<domain>`.
    assert await resolve_in_pod(other, "job-worker-0", "job-worker-0.default") == {
        "job-worker-0": "EAI_NONAME",
        "job-worker-0.default": [worker.ip],
    }
    # Answers are live: the PS becomes Ready, and the next lookup sees it; and a process connects by name.
    set_pod_status(store, "default", "job-ps-0", ps.ip, ready=True)
    server = await in_pod(ps, _SERVE, "ps")
    assert server.stdout is not None
    assert await asyncio.wait_for(server.stdout.readline(), 30) == b"listening\n"
    assert (await run_in_pod(client, _CONNECT, "job-ps-0")).strip() == "hello from ps"
    assert (await asyncio.wait_for(server.communicate(), 30))[0].decode().strip() == client.ip


async def test_many_pods_at_once_and_an_answer_too_big_for_udp(network: PodNetwork, store: Store) -> None:
    """40 sandboxes created concurrently get distinct addresses; a Service over all of them answers more
    than fits a UDP reply, so the pod's resolver gets a truncated answer and asks again over TCP."""
    sandboxes = await asyncio.gather(*(network.create_sandbox("default", f"m{i}", f"{i:08x}-m") for i in range(40)))
    assert len({sb.ip for sb in sandboxes}) == 40 and len({sb.netns for sb in sandboxes}) == 40
    add_service(store, "default", "many", {"app": "m"}, clusterIP="None")
    for i, sb in enumerate(sandboxes):
        add_pod(store, "default", f"m{i}", {"app": "m"}, sb.ip, ready=True)
    assert network.dns is not None and network.dns.tcp_queries == 0
    got = await resolve_in_pod(sandboxes[0], "many")
    assert sorted(got["many"]) == sorted(sb.ip for sb in sandboxes)
    assert network.dns.tcp_queries > 0


async def test_stop_during_creations_and_cancelled_or_concurrent_removals_leave_nothing(store: Store) -> None:
    net = PodNetwork(store=store)
    await net.start()
    try:
        # A creation cancelled halfway (anyio's cancellation hits every later await too) undoes itself.
        scope = anyio.CancelScope()

        async def create_in_scope() -> None:
            with scope:
                await net.create_sandbox("default", "c", "cccccccc-0")

        creation = asyncio.ensure_future(create_in_scope())
        await asyncio.sleep(0)  # it runs up to its first `ip` command
        scope.cancel()
        await creation
        assert scope.cancelled_caught
        assert [x for x in leftovers(net.prefix) if "cccccccc" in x] == []
        # asyncio's cancellation of a caller (the kubelet cancels a pod's tasks) interrupts neither a
        # creation's undoing nor a removal.
        for step in ("create", "remove"):
            b = await net.create_sandbox("default", "b", "bbbbbbbb-0") if step == "remove" else None
            task = asyncio.ensure_future(
                net.remove_sandbox(b) if b else net.create_sandbox("default", "b", "bbbbbbbb-0")
            )
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await eventually(lambda: not [x for x in leftovers(net.prefix) if "bbbbbbbb" in x], what=f"{step}: b gone")
        # Two removals at once: both return when it is gone.
        a = await net.create_sandbox("default", "a", "aaaaaaaa-0")
        await asyncio.gather(net.remove_sandbox(a), net.remove_sandbox(a))
        assert [x for x in leftovers(net.prefix) if a.name in x] == []
        # stop() while ten creations are under way: each finishes or fails with a clear error.
        creations = [asyncio.ensure_future(net.create_sandbox("default", f"p{i}", f"{i:08x}-p")) for i in range(10)]
        await asyncio.sleep(0)  # let them start
    finally:
        await net.stop()
    results = await asyncio.gather(*creations, return_exceptions=True)
    for result in results:
        assert isinstance(result, PodNetworkError) and "stopped while a pod sandbox was being created" in str(result)
    assert leftovers(net.prefix) == []


def test_addresses_skip_the_bridge_and_dot_0_and_255_and_reuse_last() -> None:
    addresses = _Addresses(ipaddress.IPv4Network("10.1.0.0/29"))
    assert str(addresses.gateway) == "10.1.0.1"
    handed = [addresses.allocate() for _ in range(5)]
    assert handed == ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"]
    with pytest.raises(PodNetworkError, match="10.1.0.0/29 has no free address"):
        addresses.allocate()
    addresses.release("10.1.0.4")
    addresses.release("10.1.0.2")
    assert [addresses.allocate(), addresses.allocate()] == ["10.1.0.4", "10.1.0.2"]
    wide = _Addresses(ipaddress.IPv4Network("10.244.0.0/16"))
    first = [wide.allocate() for _ in range(256)]
    assert first[0] == "10.244.0.2" and "10.244.0.255" not in first and "10.244.1.0" not in first
    assert first[253:] == ["10.244.1.1", "10.244.1.2", "10.244.1.3"]
    wide.release("10.244.0.2")
    assert wide.allocate() == "10.244.1.4"  # fresh ones first


@pytest.mark.parametrize(
    ("cidr", "domain", "message"),
    [
        ("10.244.0.0/33", "cluster.local", "pod CIDR '10.244.0.0/33' is not an IPv4 network"),
        ("10.244.0.1/16", "cluster.local", "pod CIDR '10.244.0.1/16' is not an IPv4 network"),
        ("10.244.0.0/30", "cluster.local", "pod CIDR '10.244.0.0/30' is too small"),
        ("10.244.0.0/16", ".", "cluster domain must not be empty"),
    ],
)
def test_bad_configuration_is_refused_in_one_line(store: Store, cidr: str, domain: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PodNetwork(store=store, pod_cidr=cidr, cluster_domain=domain)


# ---------------------------------------------------------------- cluster DNS answers (no root needed)


def _ask(dns: ClusterDNS, name: str, qtype: str = "A", limit: int = 512, edns: int | None = None) -> DNSRecord:
    query = DNSRecord.question(name, qtype)
    if edns:
        query.add_ar(EDNS0(udp_len=edns))
    packed = dns.answer(query.pack(), limit=limit)
    assert packed is not None
    reply = DNSRecord.parse(packed)
    assert reply.header.id == query.header.id and reply.header.qr == 1
    return reply


def _ips(reply: DNSRecord) -> list[str]:
    return sorted(str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A)


def test_dns_answers_like_coredns(store: Store) -> None:
    dns = ClusterDNS(store)
    add_service(store, "default", "head", {"app": "h"}, clusterIP="None")
    add_service(store, "default", "plain", {"app": "h"})
    add_service(store, "default", "ext", None, type="ExternalName", externalName="db.example.com")
    add_service(store, "default", "noselector", None, clusterIP="None")
    add_service(store, "default", "all", {"app": "n"}, clusterIP="None", publishNotReadyAddresses=True)
    add_pod(store, "default", "h1", {"app": "h"}, "10.244.0.5", ready=True, hostname="w0", subdomain="head")
    add_pod(store, "default", "h2", {"app": "h"}, "10.244.0.6", ready=True)
    add_pod(store, "default", "h3", {"app": "h"}, "10.244.0.7", ready=False)
    add_pod(store, "default", "h4", {"app": "h"}, None, ready=True)
    add_pod(store, "default", "n1", {"app": "n"}, "10.244.0.8", ready=False)

    head = _ask(dns, "head.default.svc.cluster.local")
    assert head.header.rcode == RCODE.NOERROR and head.header.aa == 1
    assert _ips(head) == ["10.244.0.5", "10.244.0.6"]  # ready, with an IP
    assert {rr.ttl for rr in head.rr} == {5}
    assert _ips(_ask(dns, "HEAD.Default.SVC.cluster.local.")) == ["10.244.0.5", "10.244.0.6"]  # case-insensitive
    assert _ips(_ask(dns, "w0.head.default.svc.cluster.local")) == ["10.244.0.5"]
    assert _ips(_ask(dns, "10-244-0-6.head.default.svc.cluster.local")) == ["10.244.0.6"]
    assert _ask(dns, "w9.head.default.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    cluster_ip = store.get("services", "default", "plain")["spec"]["clusterIP"]
    assert _ips(_ask(dns, "plain.default.svc.cluster.local")) == [cluster_ip]
    ext = _ask(dns, "ext.default.svc.cluster.local")
    assert [(rr.rtype, str(rr.rdata)) for rr in ext.rr] == [(QTYPE.CNAME, "db.example.com.")]
    assert _ask(dns, "noselector.default.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    assert _ips(_ask(dns, "all.default.svc.cluster.local")) == ["10.244.0.8"]  # publishNotReadyAddresses
    assert _ips(_ask(dns, "10-244-0-9.default.pod.cluster.local")) == ["10.244.0.9"]

    # A known name of another type: NOERROR, no answer, the SOA for negative caching.
    aaaa = _ask(dns, "head.default.svc.cluster.local", "AAAA")
    assert aaaa.header.rcode == RCODE.NOERROR and aaaa.rr == [] and [a.rtype for a in aaaa.auth] == [QTYPE.SOA]
    for unknown in ("nosuch.default.svc.cluster.local", "head.other.svc.cluster.local", "default.svc.cluster.local"):
        reply = _ask(dns, unknown)
        assert reply.header.rcode == RCODE.NXDOMAIN and [a.rtype for a in reply.auth] == [QTYPE.SOA], unknown
    outside = _ask(dns, "example.com")
    assert outside.header.rcode == RCODE.NXDOMAIN and outside.header.aa == 0

    srv = _ask(dns, "_tfjob-port._tcp.head.default.svc.cluster.local", "SRV")
    assert sorted((str(rr.rdata.target), rr.rdata.port) for rr in srv.rr) == [
        ("10-244-0-6.head.default.svc.cluster.local.", 2222),
        ("w0.head.default.svc.cluster.local.", 2222),
    ]
    assert _ask(dns, "_nope._tcp.head.default.svc.cluster.local", "SRV").header.rcode == RCODE.NXDOMAIN

    # Terminating pods leave the answer; the last one leaving makes the name NXDOMAIN.
    store.delete("pods", "default", "h2", {"gracePeriodSeconds": 30})
    assert _ips(_ask(dns, "head.default.svc.cluster.local")) == ["10.244.0.5"]
    set_pod_status(store, "default", "h1", "10.244.0.5", ready=False)
    assert _ask(dns, "head.default.svc.cluster.local").header.rcode == RCODE.NXDOMAIN


def test_dns_truncates_large_udp_answers_and_rejects_garbage(store: Store) -> None:
    dns = ClusterDNS(store, cluster_domain="example.test")
    add_service(store, "default", "many", {"app": "m"}, clusterIP="None")
    for i in range(60):
        add_pod(store, "default", f"m{i}", {"app": "m"}, f"10.244.1.{i + 2}", ready=True)
    udp = _ask(dns, "many.default.svc.example.test")
    assert udp.header.tc == 1 and udp.rr == []
    assert str(udp.q.qname) == "many.default.svc.example.test."  # resolvers drop replies without their question
    assert len(_ips(_ask(dns, "many.default.svc.example.test", limit=65535))) == 60  # what TCP gets
    assert len(_ips(_ask(dns, "many.default.svc.example.test", edns=4096))) == 60  # EDNS0 raises the limit
    assert _ask(dns, "many.default.svc.cluster.local").header.rcode == RCODE.NXDOMAIN  # not this cluster's domain
    assert dns.answer(b"\x12\x34") is None
    formerr = DNSRecord.parse(dns.answer(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff"))
    assert formerr.header.id == 0x1234 and formerr.header.rcode == RCODE.FORMERR


async def test_dns_serves_udp_and_tcp(store: Store) -> None:
    """The server on loopback sockets: one query over UDP, two over one TCP connection."""
    add_service(store, "default", "head", {"app": "h"}, clusterIP="None")
    add_pod(store, "default", "h1", {"app": "h"}, "10.244.0.5", ready=True)
    dns = ClusterDNS(store)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    await dns.start(udp, tcp)
    try:
        query = DNSRecord.question("head.default.svc.cluster.local")
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, lambda: query.send(*udp.getsockname(), timeout=10))
        assert _ips(DNSRecord.parse(reply)) == ["10.244.0.5"]
        reader, writer = await asyncio.open_connection(*tcp.getsockname())
        for name in ("head.default.svc.cluster.local", "nosuch.default.svc.cluster.local"):
            packed = DNSRecord.question(name).pack()
            writer.write(len(packed).to_bytes(2, "big") + packed)
            length = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), 10), "big")
            answer = DNSRecord.parse(await reader.readexactly(length))
            assert str(answer.q.qname).startswith(name)
        assert answer.header.rcode == RCODE.NXDOMAIN
        writer.close()
    finally:
        await dns.close()
        await dns.close()
    assert (dns.queries, dns.tcp_queries) == (3, 2)


def test_pod_files_format() -> None:
    assert resolv_conf("ns", "10.0.0.1", "c.local").splitlines() == [
        "search ns.svc.c.local svc.c.local c.local",
        "nameserver 10.0.0.1",
        "options ndots:5",
    ]
    assert hosts_file("10.0.0.2", "h", None).splitlines()[-1] == "10.0.0.2\th"
