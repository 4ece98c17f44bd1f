"""Pod network of the process runtime: a network namespace and an IP per pod, and cluster DNS.

Why: with the process runtime every container is a real process, and a TensorFlow job's processes
all listen on the same port (2222) and find each other by Service name. On a real node each pod has
its own network namespace and IP and CoreDNS answers the names; this module gives the simulated node
the same, with the kernel's own mechanisms, so the programs run unchanged:

- a "node" network namespace ``<prefix>-node`` per simulator holding a bridge ``br0`` with the pod
  CIDR's first address (10.244.0.1/16 by default) and a fixed MAC (a bridge otherwise takes its
  lowest port's MAC, which changes as pods come and go and would strand the pods' ARP entries);
- per pod a named namespace ``<prefix>-<uid[:8]>`` (path ``/run/netns/<name>``, for setns(2) and
  ``nsenter --net=``) with ``lo`` up and ``eth0``, one end of a veth pair whose other end is a port of
  the bridge; ``eth0`` has the pod IP with the CIDR's prefix length, so the only route is the
  connected one: pods reach each other (and the DNS server) by IP over the bridge, and nothing else
  (no default route, no uplink: no way to the host or outside);
- cluster DNS (dns.py) on the bridge address, port 53, UDP and TCP; its sockets are created inside
  the node namespace by a short-lived thread that enters it with setns(2) (through ctypes: Python 3.11
  has no ``os.setns``; a network namespace switch affects only the calling thread, and sockets keep
  the namespace they were created in) and then served by the simulator's own event loop, which is
  the only reader of the store the answers come from;
- per pod an ``etc_dir`` (``/etc/netns/<name>``, the directory ``ip netns exec`` also uses) with the
  ``resolv.conf`` and ``hosts`` kubelet writes, to be bind-mounted over ``/etc/resolv.conf`` and
  ``/etc/hosts`` in the container's private mount namespace.

Pod IPs come from the pod CIDR like the annotation runtime's allocator hands them out (from the
second address of 10.244.0.0 on, skipping addresses ending in .0 and .255), with the first address
kept for the bridge and DNS. In a simulator on the process runtime every pod IP comes from here. A
released address goes to the back of the queue: fresh addresses are used first, so an address is
reused only after the whole CIDR has been handed out (a peer that still holds a dead pod's address
then reaches nothing rather than a newer pod).

Why the ``ip`` command (iproute2) over asyncio subprocesses rather than a netlink library
(pyroute2): three short commands per pod (``ip netns add`` and two ``ip -n NS -batch``), a few
milliseconds each, do it, the commands are the documented interface every administrator can replay
by hand, and no dependency with its own namespace-switching helpers is needed.

Hygiene: nothing is created in the host's network namespace, ever (the veth pair is created inside
the node namespace with its peer placed straight into the pod's). Every name starts with
``tfsim<pid>-<n>`` (``prefix``). ``stop()`` removes everything and may be called again. A janitor
child (janitor.py) removes the named namespaces and /etc/netns dirs when the simulator dies without
stopping (SIGKILL), and ``start()`` sweeps what simulators whose pid is gone left behind. Root is
required (namespaces, veth): without it ``start()`` raises :class:`PodNetworkUnavailable`.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ipaddress
import itertools
import os
import shutil
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from tfjob_sim.process import janitor as janitor_mod
from tfjob_sim.process.dns import ClusterDNS, StoreReader

log = structlog.get_logger(__name__)

_CLONE_NEWNET = 0x40000000
_BRIDGE = "br0"
_BRIDGE_MAC = "02:00:00:00:00:01"  # locally administered; each node namespace is its own L2 segment
_DNS_PORT = 53
_instances = itertools.count()


class PodNetworkUnavailable(RuntimeError):
    """The machine cannot give pods their own network (not root, no iproute2, ...): one line why."""


class PodNetworkError(RuntimeError):
    """A network operation failed (the message says which command and what it printed)."""


@dataclass(frozen=True)
class Sandbox:
    name: str  # unique, "<prefix>-<pod uid[:8]>"
    ip: str  # the pod IP, inside the pod CIDR
    netns: str  # a path usable with setns(2) / nsenter --net=PATH (/run/netns/NAME)
    etc_dir: str  # holds this pod's resolv.conf and hosts, to bind-mount over /etc/resolv.conf and /etc/hosts


@dataclass
class _SandboxState:
    sandbox: Sandbox
    veth: str  # the bridge-side end, in the node namespace
    removal: asyncio.Task[None] | None = None  # the one removal under way; concurrent callers await it


class _Addresses:
    """Pod IPs of a CIDR: fresh ones first, released ones afterwards in the order they were released."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.gateway = network.network_address + 1
        self._next = int(network.network_address) + 2
        self._last = int(network.broadcast_address) - 1
        self._released: collections.deque[int] = collections.deque()
        self._network = network

    def allocate(self) -> str:
        while self._next <= self._last and self._next & 0xFF in (0, 255):
            self._next += 1
        if self._next <= self._last:
            value = self._next
            self._next += 1
        elif self._released:
            value = self._released.popleft()
        else:
            raise PodNetworkError(f"the pod network {self._network} has no free address")
        return str(ipaddress.IPv4Address(value))

    def release(self, ip: str) -> None:
        self._released.append(int(ipaddress.IPv4Address(ip)))


def _retrieved(task: asyncio.Task[None]) -> None:
    """A removal's failure reaches its awaiters; when they were all cancelled, it is logged here
    (the sandbox stays known, and stop() tries again and reports)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("pod sandbox removal failed", error=str(task.exception()))


def _setns_net(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _dns_sockets(netns: str, address: str, port: int) -> tuple[socket.socket, socket.socket]:
    """A bound UDP socket and a listening TCP socket at ``address:port`` inside the namespace ``netns``.

    A dedicated thread enters the namespace (only that thread moves), creates the sockets and ends;
    never a pooled thread, which would stay in the namespace for its next job."""
    result: list[tuple[socket.socket, socket.socket]] = []
    failure: list[BaseException] = []

    def work() -> None:
        udp = tcp = None
        try:
            _setns_net(netns)
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.bind((address, port))
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((address, port))
            tcp.listen(128)
            result.append((udp, tcp))
        except BaseException as exc:  # handed to the caller's thread, raised there
            for sock in (udp, tcp):
                if sock is not None:
                    sock.close()
            failure.append(exc)

    thread = threading.Thread(target=work, name="tfsim-dns-sockets", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def resolv_conf(namespace: str, dns_ip: str, cluster_domain: str) -> str:
    """The resolv.conf kubelet writes for ``dnsPolicy: ClusterFirst`` (the node's own search domains aside)."""
    return (
        f"search {namespace}.svc.{cluster_domain} svc.{cluster_domain} {cluster_domain}\n"
        f"nameserver {dns_ip}\n"
        "options ndots:5\n"
    )


def hosts_file(ip: str, hostname: str, fqdn: str | None) -> str:
    """The hosts file kubelet writes for a pod: localhost entries, then the pod's own name(s)."""
    own = f"{ip}\t{fqdn}\t{hostname}" if fqdn else f"{ip}\t{hostname}"
    return (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\n"
        "fe00::0\tip6-mcastprefix\n"
        "fe00::1\tip6-allnodes\n"
        "fe00::2\tip6-allrouters\n"
        f"{own}\n"
    )


class PodNetwork:
    """The pod network of one simulator, shared by all its simulated nodes (see the module docstring).

    Use it from the event loop that owns the store: the DNS server reads the store on that loop."""

    def __init__(
        self, *, store: StoreReader, pod_cidr: str = "10.244.0.0/16", cluster_domain: str = "cluster.local"
    ) -> None:
        try:
            network = ipaddress.IPv4Network(pod_cidr, strict=True)
        except ValueError as exc:
            raise ValueError(f"pod CIDR {pod_cidr!r} is not an IPv4 network: {exc}") from None
        if network.prefixlen > 29:
            raise ValueError(f"pod CIDR {pod_cidr!r} is too small: at least a /29 is needed")
        domain = cluster_domain.strip(".")
        if not domain:
            raise ValueError("cluster domain must not be empty")
        self._store = store
        self._network = network
        self._addresses = _Addresses(network)
        self.cluster_domain = domain
        self.prefix = f"tfsim{os.getpid()}-{next(_instances)}"
        self.node_netns_name = f"{self.prefix}-node"
        self.node_netns = os.path.join(janitor_mod.NETNS_DIR, self.node_netns_name)
        self.dns_ip = str(self._addresses.gateway)
        self.dns: ClusterDNS | None = None
        self._sandboxes: dict[str, _SandboxState] = {}
        self._veth_ids = itertools.count(1)
        self._janitor: asyncio.subprocess.Process | None = None
        self._creating: set[asyncio.Future[None]] = set()  # one per create_sandbox() under way
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, cgroups_on_exit: Sequence[str] = (), dirs_on_exit: Sequence[str] = ()) -> None:
        """Create the node namespace, its bridge and the DNS server. Raises PodNetworkUnavailable
        (with the reason in one line) when this machine or user cannot.

        The janitor started here also kills and removes the cgroup trees ``cgroups_on_exit`` and
        removes the directories ``dirs_on_exit`` if this process dies without stopping: the process
        runtime's, so that one janitor serves the whole simulator."""
        if self._started:
            raise PodNetworkError("PodNetwork.start() called twice")
        if os.geteuid() != 0:
            raise PodNetworkUnavailable(
                "the process runtime needs root: pods get their own network namespaces and veth pairs"
            )
        if shutil.which("ip") is None:
            raise PodNetworkUnavailable("the process runtime needs the `ip` command (iproute2) on PATH")
        self._started = True
        try:
            for error in await asyncio.to_thread(janitor_mod.sweep_stale):
                log.warning("could not remove a dead simulator's pod network leftovers", error=error)
            # Anything already under this prefix was left by an earlier process with the same pid.
            for error in await asyncio.to_thread(janitor_mod.cleanup, self.prefix):
                raise PodNetworkError(f"cannot remove an earlier process's leftovers under {self.prefix}: {error}")
            await self._start_janitor(cgroups_on_exit, dirs_on_exit)
            await self._ip("netns", "add", self.node_netns_name)
            await self._ip_batch(
                self.node_netns_name,
                f"link add {_BRIDGE} address {_BRIDGE_MAC} type bridge",
                f"addr add {self.dns_ip}/{self._network.prefixlen} dev {_BRIDGE}",
                f"link set {_BRIDGE} up",
                "link set lo up",
            )
            udp, tcp = _dns_sockets(self.node_netns, self.dns_ip, _DNS_PORT)
            self.dns = ClusterDNS(self._store, self.cluster_domain)
            await self.dns.start(udp, tcp)
        except BaseException:
            await self.stop()
            raise
        log.info("pod network started", prefix=self.prefix, pod_cidr=str(self._network), dns=self.dns_ip)

    async def _start_janitor(self, cgroups: Sequence[str], dirs: Sequence[str]) -> None:
        paths = [arg for path in cgroups for arg in ("--cgroup", path)] + [
            arg for path in dirs for arg in ("--dir", path)
        ]
        self._janitor = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            janitor_mod.__file__,
            self.prefix,
            *paths,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # signals to the simulator's process group must not take it along
        )

    async def stop(self) -> None:
        """Remove every namespace, interface, file and process this network created. Idempotent.

        Shielded from cancellation: it is what runs in ``finally`` blocks while the simulator is being
        cancelled, and stopping halfway would leave namespaces behind."""
        with anyio.CancelScope(shield=True):
            await self._stop()

    async def _stop(self) -> None:
        self._stopped = True
        if self._creating:
            await asyncio.wait(list(self._creating))
        if self.dns is not None:
            await self.dns.close()
            self.dns = None
        states = list(self._sandboxes.values())
        results = await asyncio.gather(*(self.remove_sandbox(s.sandbox) for s in states), return_exceptions=True)
        errors = [str(r) or repr(r) for r in results if isinstance(r, BaseException)]
        errors += await asyncio.to_thread(janitor_mod.cleanup, self.prefix)
        if self._janitor is not None:
            janitor, self._janitor = self._janitor, None
            assert janitor.stdin is not None
            janitor.stdin.close()
            await janitor.wait()
        if errors:
            raise PodNetworkError(f"pod network {self.prefix} was not removed completely: {'; '.join(errors)}")

    # ------------------------------------------------------------------ sandboxes

    async def create_sandbox(
        self, namespace: str, pod_name: str, uid: str, hostname: str | None = None, subdomain: str | None = None
    ) -> Sandbox:
        """A pod's network namespace, joined to the bridge, with an IP and its resolv.conf/hosts."""
        if not self._started or self._stopped or self.dns is None:
            raise PodNetworkError("the pod network is not running (start() it first; after stop() it is gone)")
        name = self._sandbox_name(uid)
        ip = self._addresses.allocate()
        veth = f"v{next(self._veth_ids)}"
        host = (hostname or pod_name)[:63].rstrip("-.")  # as kubelet shortens a pod name to a hostname
        fqdn = f"{host}.{subdomain}.{namespace}.svc.{self.cluster_domain}" if subdomain else None
        etc_dir = Path(janitor_mod.ETC_NETNS_DIR) / name
        sandbox = Sandbox(name=name, ip=ip, netns=os.path.join(janitor_mod.NETNS_DIR, name), etc_dir=str(etc_dir))
        self._sandboxes[name] = _SandboxState(sandbox, veth)
        finished = asyncio.get_running_loop().create_future()
        self._creating.add(finished)  # stop() waits for it: a namespace added after stop() would leak
        try:
            etc_dir.mkdir(parents=True, exist_ok=False)
            (etc_dir / "resolv.conf").write_text(resolv_conf(namespace, self.dns_ip, self.cluster_domain))
            (etc_dir / "hosts").write_text(hosts_file(ip, host, fqdn))
            await self._ip("netns", "add", name)
            self._check_running()
            await self._ip_batch(
                self.node_netns_name,
                f"link add {veth} type veth peer name eth0 netns {name}",
                f"link set {veth} master {_BRIDGE} up",
            )
            self._check_running()
            await self._ip_batch(
                name,
                f"addr add {ip}/{self._network.prefixlen} dev eth0",
                "link set eth0 up",
                "link set lo up",
            )
            self._check_running()
        except BaseException:
            try:
                await self.remove_sandbox(sandbox)
            except PodNetworkError as cleanup_error:  # stop() and the janitor remove it later; report both
                log.warning("could not undo a failed pod sandbox", sandbox=name, error=str(cleanup_error))
            raise
        finally:
            self._creating.discard(finished)
            finished.set_result(None)
        return sandbox

    def _check_running(self) -> None:
        if self._stopped:
            raise PodNetworkError("the pod network was stopped while a pod sandbox was being created")

    def _sandbox_name(self, uid: str) -> str:
        short = "".join(ch for ch in uid.lower() if ch.isalnum())[:8] or "pod"
        name = f"{self.prefix}-{short}"
        for n in itertools.count(2):
            if name not in self._sandboxes and name != self.node_netns_name:
                return name
            name = f"{self.prefix}-{short}-{n}"
        raise AssertionError("unreachable")

    async def remove_sandbox(self, sandbox: Sandbox) -> None:
        """Remove the pod's namespace, veth pair and files, and free its IP. Idempotent.

        A process still inside the namespace is SIGKILLed first (the runtime stops containers before
        this; anything left would keep the namespace, and the address, alive unseen)."""
        state = self._sandboxes.get(sandbox.name)
        if state is None or state.sandbox != sandbox:
            return
        if state.removal is None or state.removal.cancelled():
            # A task of its own, shielded from the caller's cancellation (asyncio's, and anyio's, which
            # would hit every later await): a removal cut short (a pod deleted while the simulator shuts
            # down) would leave a half-removed sandbox whose address is still in use.
            state.removal = asyncio.get_running_loop().create_task(self._remove(state))
            state.removal.add_done_callback(_retrieved)
        with anyio.CancelScope(shield=True):
            await asyncio.shield(state.removal)

    async def _remove(self, state: _SandboxState) -> None:
        sandbox = state.sandbox
        killed = await asyncio.to_thread(janitor_mod.kill_netns_processes, sandbox.netns)
        if killed:
            log.warning("killed processes left in a removed pod's network namespace", sandbox=sandbox.name, pids=killed)
        errors = []
        # Deleting the bridge end removes the pair at once, even while the pod namespace lingers (a
        # killed process not yet reaped), so the address is gone before it can be reused. Already gone
        # (the pod namespace went first) or no node namespace (a failed start): nothing to delete.
        rc, err = await self._run_ip("-n", self.node_netns_name, "link", "del", state.veth)
        if rc != 0 and "Cannot find device" not in err and "Cannot open network namespace" not in err:
            errors.append(f"ip -n {self.node_netns_name} link del {state.veth}: {err.strip()}")
        error = await asyncio.to_thread(janitor_mod.delete_netns, sandbox.name)
        if error:
            errors.append(error)
        await asyncio.to_thread(shutil.rmtree, sandbox.etc_dir, True)
        if errors:
            state.removal = None  # a later call tries again
            raise PodNetworkError(f"pod sandbox {sandbox.name} was not removed completely: {'; '.join(errors)}")
        del self._sandboxes[sandbox.name]
        self._addresses.release(sandbox.ip)

    # ------------------------------------------------------------------ ip(8)

    async def _run_ip(self, *args: str, stdin: str | None = None) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "ip",
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        assert proc.returncode is not None
        return proc.returncode, err.decode(errors="replace")

    async def _ip(self, *args: str) -> None:
        rc, err = await self._run_ip(*args)
        if rc != 0:
            raise PodNetworkError(f"ip {' '.join(args)}: {err.strip() or f'exit status {rc}'}")

    async def _ip_batch(self, netns: str, *commands: str) -> None:
        """Run several ip commands inside one named namespace with a single exec."""
        rc, err = await self._run_ip("-n", netns, "-batch", "-", stdin="\n".join(commands) + "\n")
        if rc != 0:
            raise PodNetworkError(f"ip -n {netns} -batch ({'; '.join(commands)}): {err.strip() or f'exit status {rc}'}")
