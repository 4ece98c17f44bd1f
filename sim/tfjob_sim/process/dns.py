"""Cluster DNS of the process runtime: the answers CoreDNS's kubernetes plugin gives, from the live store.

Why it exists: a TensorFlow program reads host names such as ``job-worker-1.default.svc:2222`` from
TF_CONFIG and resolves them with the ordinary resolver (glibc's getaddrinfo, or gRPC's c-ares), through
``/etc/resolv.conf``'s nameserver and search list. For those names to work unchanged, something must
answer DNS queries the way a cluster's DNS does. This is that server: real DNS on the wire (UDP and
TCP), answers computed per query from the simulator's store, so a pod that becomes Ready, a Service
that is deleted or a replacement pod with a new IP is visible to the next query, with no copy to keep
in sync.

Why it runs in the simulator's event loop (not in a child process): the answers come from the
in-memory store, which only the loop's thread may read; a child would need its own copy of the
cluster state and a protocol to keep it current. An answer costs a store read or two (microseconds
to a millisecond), so serving on the loop costs the API server nothing noticeable, and the server
dies with the simulator by construction (no process to leak). The sockets it serves are created by
the caller inside the node network namespace (see network.py); this module only speaks DNS on them.

Why dnslib: DNS message encoding (name compression, the header bits, EDNS0, truncation) is fiddly
and well covered by a small, pure-Python, maintained library; only the answers are ours.

Answers (``<domain>`` is the cluster domain, ``cluster.local`` by default), as CoreDNS gives them:

- ``<svc>.<ns>.svc.<domain>``: a headless Service (``clusterIP: None``) with a selector -> an A record
  per selected pod that has a podIP, is Ready, not terminating and not finished (also the not-Ready
  ones with ``publishNotReadyAddresses``); no such pod -> NXDOMAIN. A ClusterIP Service -> its
  ``clusterIP`` (nothing routes it: there is no kube-proxy; connecting fails at once with "network
  unreachable"). An ExternalName Service -> a CNAME to its ``externalName``. A headless Service
  without a selector has no endpoints here (the simulator runs no endpoints controller) -> NXDOMAIN.
- ``<hostname>.<svc>.<ns>.svc.<domain>``: a pod of that headless Service whose ``spec.hostname`` is
  ``<hostname>`` and ``spec.subdomain`` is ``<svc>``; also ``<a-b-c-d>.<svc>.<ns>.svc.<domain>`` for
  an endpoint without hostname (CoreDNS names those by their dashed IP).
- ``<a-b-c-d>.<ns>.pod.<domain>`` -> ``a.b.c.d`` (CoreDNS's ``pods insecure``, its default).
- SRV ``_<port>._<proto>.<svc>.<ns>.svc.<domain>``: one record per endpoint (headless: target
  ``<hostname or a-b-c-d>.<svc>.<ns>.svc.<domain>``; ClusterIP: the Service name) for a named port.
- A known name asked for another type (AAAA: the cluster is IPv4-only) -> NOERROR with no answer.
- An unknown name in the cluster domain -> NXDOMAIN (with the zone's SOA, for negative caching).
- Anything outside the cluster domain -> NXDOMAIN at once: there is no upstream network to forward
  to. Not REFUSED or SERVFAIL: glibc tries a short name through the search list and then as it is,
  and a refusal of that last query turns the answer for an unknown short Service name into
  getaddrinfo's "Temporary failure in name resolution" (which callers retry) instead of "Name or
  service not known".

TTLs are CoreDNS's default, 5 seconds, so resolvers that cache see what a real pod would.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog
from dnslib import CNAME, QTYPE, RCODE, RR, SOA, SRV, A, DNSError, DNSHeader, DNSLabel, DNSRecord

log = structlog.get_logger(__name__)

DEFAULT_TTL = 5  # seconds; the kubernetes plugin's default ``ttl``
# The classic DNS limit over UDP without EDNS0; larger answers are truncated (TC) and the resolver
# asks again over TCP.
_UDP_LIMIT = 512
_TCP_IDLE_SECONDS = 10.0  # an idle TCP client is dropped after this long (a resolver asks, reads, leaves)


class StoreReader(Protocol):
    """What this module reads from tfjob_sim.store.Store."""

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None: ...

    def list(
        self, resource: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict], str]: ...


@dataclass(frozen=True)
class _Endpoint:
    ip: str
    hostname: str | None  # spec.hostname when spec.subdomain names the Service


def _is_ready(pod: dict) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _dashed(ip: str) -> str:
    return ip.replace(".", "-")


class ClusterDNS:
    """Answers DNS queries for one cluster domain from a store; serves them on given sockets.

    ``answer(bytes) -> bytes | None`` is the whole protocol (None: not a DNS query, dropped);
    ``start(udp_sock, tcp_sock)`` serves it on the running asyncio loop, ``close()`` stops serving
    and closes the sockets (idempotent).
    """

    def __init__(self, store: StoreReader, cluster_domain: str = "cluster.local", ttl: int = DEFAULT_TTL) -> None:
        domain = cluster_domain.strip(".").lower()
        if not domain:
            raise ValueError("cluster domain must not be empty")
        self._store = store
        self._ttl = ttl
        self._zone = DNSLabel(domain + ".")
        self._zone_labels = tuple(domain.split("."))
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._tcp_clients: set[asyncio.Task] = set()
        self.queries = 0  # answered queries (UDP and TCP), for tests and debugging
        self.tcp_queries = 0  # of which over TCP

    # ------------------------------------------------------------------ serving

    async def start(self, udp_sock: socket.socket, tcp_sock: socket.socket) -> None:
        """Serve on two bound sockets (the TCP one listening or not yet); they belong to this object now."""
        loop = asyncio.get_running_loop()
        udp_sock.setblocking(False)
        tcp_sock.setblocking(False)
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _UDPProtocol(self), sock=udp_sock)
        self._tcp = await asyncio.start_server(self._serve_tcp_client, sock=tcp_sock, backlog=128)

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            for task in list(self._tcp_clients):
                task.cancel()
            if self._tcp_clients:
                await asyncio.gather(*self._tcp_clients, return_exceptions=True)
            await self._tcp.wait_closed()
            self._tcp = None

    async def _serve_tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tcp_clients.add(task)
        try:
            while True:
                async with asyncio.timeout(_TCP_IDLE_SECONDS):
                    header = await reader.readexactly(2)
                    (length,) = struct.unpack("!H", header)
                    data = await reader.readexactly(length)
                self.tcp_queries += 1
                reply = self.safe_answer(data, limit=65535)
                if reply is None:
                    return
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            return  # the client left, went idle or reset: normal ends of a DNS TCP session
        finally:
            self._tcp_clients.discard(task)
            writer.close()

    # ------------------------------------------------------------------ protocol

    def safe_answer(self, data: bytes, limit: int = _UDP_LIMIT) -> bytes | None:
        """answer(), but a bug in it is logged and answered SERVFAIL: the server keeps serving."""
        try:
            return self.answer(data, limit)
        except Exception:
            log.exception("cluster DNS failed to answer a query")
            return DNSRecord(DNSHeader(id=struct.unpack("!H", data[:2])[0], qr=1, rcode=RCODE.SERVFAIL)).pack()

    def answer(self, data: bytes, limit: int = _UDP_LIMIT) -> bytes | None:
        """The packed reply to one query packet, at most ``limit`` bytes (else truncated, TC set)."""
        try:
            request = DNSRecord.parse(data)
        except (DNSError, struct.error, IndexError, ValueError, UnicodeDecodeError):
            if len(data) < 12:
                return None  # not even a header: nothing to answer to
            ident, flags = struct.unpack("!HH", data[:4])
            if flags & 0x8000:
                return None  # a response, not a query
            reply = DNSRecord(DNSHeader(id=ident, qr=1, rcode=RCODE.FORMERR))
            return reply.pack()
        if request.header.qr:
            return None
        self.queries += 1
        reply = self._reply(request)
        for extra in request.ar:
            if extra.rtype == QTYPE.OPT:  # EDNS0: the client accepts UDP answers up to this size
                limit = max(limit, min(int(extra.rclass), 65535))
        packed = reply.pack()
        if len(packed) > limit:
            truncated = DNSRecord(DNSHeader(id=reply.header.id, qr=1, aa=1, ra=0, tc=1, rd=request.header.rd))
            truncated.add_question(*request.questions)  # resolvers ignore replies whose question differs
            packed = truncated.pack()
        return packed

    def _reply(self, request: DNSRecord) -> DNSRecord:
        reply = DNSRecord(DNSHeader(id=request.header.id, qr=1, aa=1, ra=0, rd=request.header.rd))
        reply.add_question(*request.questions)
        if request.header.opcode != 0 or len(request.questions) != 1:
            reply.header.rcode = RCODE.NOTIMP if request.header.opcode != 0 else RCODE.FORMERR
            return reply
        question = request.q
        labels = tuple(str(question.qname).rstrip(".").lower().split("."))
        zone_len = len(self._zone_labels)
        if labels[-zone_len:] != self._zone_labels:
            reply.header.aa = 0  # not our zone: no upstream to ask, so no such name here
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        records = self._lookup(labels[:-zone_len], question.qname, question.qtype)
        if records is None:
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self._soa())
            return reply
        wanted = [rr for rr in records if question.qtype in (rr.rtype, QTYPE.ANY) or rr.rtype == QTYPE.CNAME]
        for rr in wanted:
            reply.add_answer(rr)
        if not wanted:
            reply.add_auth(self._soa())
        return reply

    def _soa(self) -> RR:
        soa = SOA(
            DNSLabel("ns.dns." + str(self._zone)),
            DNSLabel("hostmaster." + str(self._zone)),
            (1, 7200, 1800, 86400, self._ttl),
        )
        return RR(self._zone, QTYPE.SOA, rdata=soa, ttl=self._ttl)

    # ------------------------------------------------------------------ names -> records

    def _lookup(self, rel: tuple[str, ...], qname: DNSLabel, qtype: int) -> list[RR] | None:
        """The records of a name (relative labels under the zone), or None when it does not exist."""
        if rel == ():
            return [self._soa()]  # the zone apex exists; its only record here is the SOA
        if rel[-1] == "svc":
            if len(rel) == 3:
                return self._service_records(rel[1], rel[0], qname)
            if len(rel) == 4:
                return self._endpoint_records(rel[2], rel[1], rel[0], qname)
            if len(rel) == 5 and rel[0].startswith("_") and rel[1].startswith("_"):
                return self._srv_records(rel[3], rel[2], rel[0][1:], rel[1][1:], qname)
            return None
        if rel[-1] == "pod" and len(rel) == 3:
            ip = self._undash(rel[0])
            return None if ip is None else [RR(qname, QTYPE.A, rdata=A(ip), ttl=self._ttl)]
        return None

    @staticmethod
    def _undash(label: str) -> str | None:
        try:
            return str(ipaddress.IPv4Address(label.replace("-", ".")))
        except ValueError:
            return None

    def _a(self, qname: DNSLabel, ips: Iterable[str]) -> list[RR]:
        return [RR(qname, QTYPE.A, rdata=A(ip), ttl=self._ttl) for ip in ips]

    def _service(self, namespace: str, name: str) -> dict | None:
        service = self._store.get("services", namespace, name)
        return service if isinstance(service, dict) else None

    def _service_records(self, namespace: str, name: str, qname: DNSLabel) -> list[RR] | None:
        service = self._service(namespace, name)
        if service is None:
            return None
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            target = spec.get("externalName")
            if not isinstance(target, str) or not target:
                return None
            return [RR(qname, QTYPE.CNAME, rdata=CNAME(target.rstrip(".") + "."), ttl=self._ttl)]
        cluster_ip = spec.get("clusterIP")
        if cluster_ip and cluster_ip != "None":
            return self._a(qname, [cluster_ip])
        endpoints = self._endpoints(namespace, service)
        return self._a(qname, sorted({e.ip for e in endpoints})) if endpoints else None

    def _endpoint_records(self, namespace: str, service_name: str, host: str, qname: DNSLabel) -> list[RR] | None:
        service = self._service(namespace, service_name)
        if service is None:
            return None
        ips = [e.ip for e in self._endpoints(namespace, service) if (e.hostname or _dashed(e.ip)) == host]
        return self._a(qname, ips) if ips else None

    def _srv_records(
        self, namespace: str, service_name: str, port_name: str, protocol: str, qname: DNSLabel
    ) -> list[RR] | None:
        service = self._service(namespace, service_name)
        if service is None:
            return None
        spec = service.get("spec") or {}
        port = next(
            (
                p
                for p in spec.get("ports") or ()
                if isinstance(p, dict)
                and p.get("name") == port_name
                and str(p.get("protocol") or "TCP").lower() == protocol
            ),
            None,
        )
        if port is None:
            return None
        base = f"{service_name}.{namespace}.svc.{self._zone}"
        if spec.get("clusterIP") not in (None, "None"):
            targets = [(base, int(port.get("port") or 0))]
        else:
            # A headless Service's endpoint listens on the targetPort (a number here; named ports are
            # resolved by the pods, which the simulator does not look into: the service port is used).
            target_port = port.get("targetPort")
            number = target_port if isinstance(target_port, int) else int(port.get("port") or 0)
            targets = [(f"{e.hostname or _dashed(e.ip)}.{base}", number) for e in self._endpoints(namespace, service)]
        if not targets:
            return None
        return [
            RR(qname, QTYPE.SRV, rdata=SRV(priority=0, weight=100, port=number, target=target), ttl=self._ttl)
            for target, number in targets
        ]

    def _endpoints(self, namespace: str, service: dict) -> list[_Endpoint]:
        """The addresses the endpoints controller would publish for a Service (ready ones, or all
        with publishNotReadyAddresses), from the pods its selector matches."""
        spec = service.get("spec") or {}
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not selector:
            return []
        publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
        name = (service.get("metadata") or {}).get("name")
        pods, _ = self._store.list("pods", namespace, label_selector=",".join(f"{k}={v}" for k, v in selector.items()))
        endpoints = []
        for pod in pods:
            status: dict[str, Any] = pod.get("status") or {}
            ip = status.get("podIP")
            if not ip or status.get("phase") in ("Succeeded", "Failed"):
                continue
            if not publish_not_ready and ((pod.get("metadata") or {}).get("deletionTimestamp") or not _is_ready(pod)):
                continue
            pod_spec = pod.get("spec") or {}
            hostname = pod_spec.get("hostname") if pod_spec.get("subdomain") == name else None
            endpoints.append(_Endpoint(ip, hostname.lower() if isinstance(hostname, str) and hostname else None))
        return endpoints


class _UDPProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: ClusterDNS) -> None:
        self._server = server
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = self._server.safe_answer(data)
        if reply is not None and self._transport is not None:
            self._transport.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("cluster DNS socket error", error=str(exc))
