"""Secure mode of the simulated cluster: TLS, authentication, authorization and the auth APIs.

Why this module exists: ``tfjob-controller sim --secure`` must prove what plain HTTP cannot — that
the controller works over TLS with CA verification and a ServiceAccount token, and that its RBAC is
sufficient — with the same answers a kubeadm cluster gives (401 bodies, TokenRequest tokens, RBAC's
403 texts, access reviews).

Contract:
- :class:`SecureMaterial` generates (with the ``cryptography`` package) a self-signed CA, a serving
  certificate for the server's host (plus localhost / 127.0.0.1 / the kubernetes service names),
  the admin's bearer token and the ES256 key that signs ServiceAccount tokens.
- :class:`AuthLayer` authenticates every request by ``Authorization: Bearer <token>``: the admin
  token (a static token, as ``--token-auth-file`` gives: user ``kubernetes-admin`` in
  ``system:masters``, the superuser of kubeadm's ``super-admin.conf``, so no RBAC object can lock
  the operator of the simulator out), or a token the TokenRequest API issued (a JWT with the real
  claims; valid while unexpired and while its ServiceAccount — and bound object, if any — exists
  with the same uid). A token rather than a client certificate for the admin because kubectl's
  ``--token`` then replaces it: ``kubectl --token "$(kubectl create token sa)"`` acts as the
  ServiceAccount with the same kubeconfig (with a certificate kubectl would send both, and the
  certificate would win). Anonymous requests are refused like ``--anonymous-auth=false``: every
  request without valid credentials gets the 401 Status. Authenticated users also get
  ``system:authenticated``; ServiceAccounts get ``system:serviceaccounts`` and
  ``system:serviceaccounts:<ns>``.
- Authorization is :class:`~tfjob_sim.rbac.RBACAuthorizer`; resource requests are described
  like kube-apiserver's RequestInfo (a request for a namespace object has that namespace as its
  namespace); other paths, ``/_sim/`` included, are non-resource URLs (cluster-admin has ``*``).
- :meth:`AuthLayer.serve` answers the create-only APIs: TokenRequest
  (``serviceaccounts/{name}/token``), SelfSubjectAccessReview, SelfSubjectRulesReview,
  SubjectAccessReview, SelfSubjectReview (``kubectl auth whoami``) and TokenReview.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hmac
import ipaddress
import secrets
import ssl
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from controller.runtime.jsonfields import field_dict, field_str
from tfjob_sim import errors
from tfjob_sim.errors import ApiError
from tfjob_sim.rbac import AUTHENTICATED, Attributes, RBACAuthorizer, UserInfo, forbidden
from tfjob_sim.store import rfc3339

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
    from cryptography.x509.oid import NameOID
except ModuleNotFoundError as exc:  # pragma: no cover - exercised by the CLI's one-line message
    raise ModuleNotFoundError(
        "the simulator's secure mode needs the 'cryptography' package: pip install 'tfjob-controller[sim]'",
        name=exc.name,
    ) from exc

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = ISSUER
ADMIN_USER = "kubernetes-admin"
ADMIN_GROUP = "system:masters"
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
UNAUTHORIZED = ApiError(401, "Unauthorized", "Unauthorized")
ADMIN = UserInfo(ADMIN_USER, groups=(ADMIN_GROUP, AUTHENTICATED))
SERVICE_ACCOUNTS = "serviceaccounts"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class SecureMaterial:
    """PEM bytes of the CA and the serving pair, the admin's token, and the token signing key."""

    ca_cert: bytes
    server_cert: bytes
    server_key: bytes
    admin_token: str
    signing_key: Any  # ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, host: str) -> SecureMaterial:
        now = _dt.datetime.now(_dt.UTC)
        not_before, not_after = now - _dt.timedelta(minutes=5), now + _dt.timedelta(days=365)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=True,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )

        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [
            x509.DNSName(n)
            for n in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ]
        ips = {"127.0.0.1"}
        try:
            ips.add(str(ipaddress.ip_address(host)))
        except ValueError:
            if host != "localhost":
                names.append(x509.DNSName(host))
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(ips)]
        server = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return cls(
            _pem(ca), _pem(server), _key_pem(key), secrets.token_urlsafe(32), ec.generate_private_key(ec.SECP256R1())
        )

    def server_ssl_context(self, directory: str) -> ssl.SSLContext:
        """TLS for the server (the key is written to ``directory``, readable by its owner only)."""
        import os

        cert_path, key_path = os.path.join(directory, "apiserver.crt"), os.path.join(directory, "apiserver.key")
        with open(cert_path, "wb") as f:
            f.write(self.server_cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.server_key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_path, key_path)
        return context


# ------------------------------------------------------------------------------------ tokens


class TokenIssuer:
    """ES256 JWTs with the claims kube-apiserver puts in a ServiceAccount token."""

    def __init__(self, key: Any) -> None:
        self._key = key
        self._public = key.public_key()
        digest = hashes.Hash(hashes.SHA256())
        digest.update(
            self._public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        self._kid = _b64url(digest.finalize())

    def issue(self, claims: dict) -> str:
        header = _b64url(orjson.dumps({"alg": "ES256", "kid": self._kid}))
        payload = _b64url(orjson.dumps(claims))
        signing_input = f"{header}.{payload}".encode()
        r, s = decode_dss_signature(self._key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        return f"{header}.{payload}." + _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def verify(self, token: str) -> dict | None:
        """The claims of a token this issuer signed, or None (bad shape or signature)."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            signature = _b64url_decode(parts[2])
            if len(signature) != 64:
                return None
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            self._public.verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
            claims = orjson.loads(_b64url_decode(parts[1]))
        except (InvalidSignature, ValueError, orjson.JSONDecodeError):
            return None
        return claims if isinstance(claims, dict) else None


# ------------------------------------------------------------------------------------ the layer

_REVIEW_KINDS = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
    ("authorization.k8s.io", "selfsubjectrulesreviews"): "SelfSubjectRulesReview",
    ("authorization.k8s.io", "subjectaccessreviews"): "SubjectAccessReview",
    ("authentication.k8s.io", "selfsubjectreviews"): "SelfSubjectReview",
    ("authentication.k8s.io", "tokenreviews"): "TokenReview",
}


class AuthLayer:
    """Authentication + RBAC authorization + the auth APIs of one secure simulated cluster."""

    def __init__(self, store: Any, material: SecureMaterial, clock: Any = time.time) -> None:
        self.store = store
        self.material = material
        self.tokens = TokenIssuer(material.signing_key)
        self.authorizer = RBACAuthorizer(store)
        self.clock = clock
        self._token_cache: dict[str, tuple[UserInfo, dict]] = {}
        # Every 403 this layer answered (the message), newest last, for tests that assert there was none.
        self.forbidden_log: deque[str] = deque(maxlen=1000)

    # -------------------------------------------------------------- authentication

    def authenticate(self, headers: Any) -> UserInfo | None:
        header = headers.get("Authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if hmac.compare_digest(token, self.material.admin_token):
            return ADMIN
        return self.authenticate_token(token)

    def authenticate_token(self, token: str) -> UserInfo | None:
        cached = self._token_cache.get(token)
        if cached is None:
            claims = self.tokens.verify(token)
            if claims is None or claims.get("iss") != ISSUER:
                return None
            info = claims.get("kubernetes.io") or {}
            sa = info.get("serviceaccount") or {}
            namespace, name, uid = info.get("namespace"), sa.get("name"), sa.get("uid")
            if not (namespace and name and uid):
                return None
            extra: dict[str, list[str]] = {}
            if claims.get("jti"):
                extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
            for kind in ("pod", "node"):
                if info.get(kind):
                    extra[f"authentication.kubernetes.io/{kind}-name"] = [info[kind]["name"]]
                    extra[f"authentication.kubernetes.io/{kind}-uid"] = [info[kind]["uid"]]
            user = UserInfo(
                f"system:serviceaccount:{namespace}:{name}",
                uid,
                ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
                extra,
            )
            if len(self._token_cache) > 10_000:
                self._token_cache.clear()
            cached = self._token_cache[token] = (user, claims)
        user, claims = cached
        if claims.get("exp", 0) <= self.clock() or claims.get("nbf", 0) > self.clock() + 60:
            return None
        info = claims["kubernetes.io"]
        sa = self.store.get(SERVICE_ACCOUNTS, info["namespace"], info["serviceaccount"]["name"])
        if sa is None or sa["metadata"].get("uid") != info["serviceaccount"]["uid"]:
            return None  # the ServiceAccount was deleted (and maybe recreated): its tokens die with it
        for kind, resource in (("pod", "pods"), ("secret", "secrets")):
            bound = info.get(kind)
            if bound:
                obj = self.store.get(resource, info["namespace"], bound["name"])
                if obj is None or obj["metadata"].get("uid") != bound["uid"]:
                    return None
        return user

    # -------------------------------------------------------------- authorization

    def attributes(self, user: UserInfo, method: str, path: str, route: Any, verb: str) -> Attributes:
        if route is None:
            # kube-apiserver's RequestInfo reads the path, not what is served: a write to a resource whose
            # CRD is gone is authorized as that resource (and then answered 404), not as a bare path.
            info = _path_resource(path)
            if info is not None:
                group, version, namespace, resource, name, subresource = info
                return Attributes(
                    user, _path_verb(method, name), True, group, version, resource, subresource, name, namespace
                )
            return Attributes(user, method.lower() if method != "HEAD" else "get", False, path=path)
        rt = route.rt
        namespace = route.namespace or ""
        if rt.plural == "namespaces" and not rt.group and route.name:
            namespace = route.name  # RequestInfo: a namespace object is in its own namespace
        return Attributes(
            user, verb, True, rt.group, rt.version, rt.plural, route.subresource or "", route.name or "", namespace
        )

    def admit(self, headers: Any, method: str, path: str, route: Any, verb: str) -> UserInfo:
        """The authenticated user of a request it may make; raises the 401 or 403 Status otherwise."""
        user = self.authenticate(headers)
        if user is None:
            raise UNAUTHORIZED
        attrs = self.attributes(user, method, path, route, verb)
        allowed, reason = self.authorizer.authorize(attrs)
        if not allowed:
            err = forbidden(attrs, reason)
            self.forbidden_log.append(err.message)
            raise err
        return user

    # -------------------------------------------------------------- create-only APIs

    def serves(self, route: Any) -> bool:
        rt = route.rt
        return (
            route.subresource == "token"
            and rt.plural == SERVICE_ACCOUNTS
            and not rt.group
            or (rt.group, rt.plural) in _REVIEW_KINDS
        )

    def serve(self, route: Any, body: Any, user: UserInfo) -> dict:
        """The 201 body of a TokenRequest or review ``body`` sent by ``user``."""
        rt = route.rt
        if route.subresource == "token":
            return self._token_request(route.namespace, route.name, body)
        kind = _REVIEW_KINDS[(rt.group, rt.plural)]
        if not isinstance(body, dict):
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {kind})")
        if body.get("kind") not in (None, kind):
            raise errors.bad_request(
                f"the kind in the data ({body.get('kind')}) does not match the expected kind ({kind})"
            )
        spec = field_dict(body, "spec")
        out = {
            "kind": kind,
            "apiVersion": f"{rt.group}/v1",
            "metadata": {
                "creationTimestamp": None,
                **{
                    k: v
                    for k, v in (body.get("metadata") or {}).items()
                    if k in ("name", "namespace", "labels", "annotations")
                },
            },
        }
        if kind == "SelfSubjectReview":
            return {**out, "status": {"userInfo": user.to_api()}}
        if kind == "TokenReview":
            token = spec.get("token") or ""
            reviewed = self.authenticate_token(token) if isinstance(token, str) and token else None
            status: dict[str, Any] = (
                {"authenticated": True, "user": reviewed.to_api(), "audiences": [AUDIENCE]}
                if reviewed
                else {"user": {}}
            )
            return {**out, "spec": spec, "status": status}
        if kind == "SelfSubjectRulesReview":
            namespace = spec.get("namespace") or ""
            if not namespace:
                raise errors.bad_request("no namespace on request")
            resource_rules, non_resource_rules, error = self.authorizer.rules_for(user, namespace)
            status = {
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource_rules,
                "incomplete": bool(error),
            }
            if error:
                status["evaluationError"] = error
            return {**out, "spec": spec, "status": status}
        subject = user
        if kind == "SubjectAccessReview":
            if not spec.get("user") and not spec.get("groups"):
                raise errors.invalid(
                    kind,
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "field": "spec.user",
                            "message": "Required value: at least one of user or group must be specified",
                        }
                    ],
                    rt.group,
                )
            subject = UserInfo(
                spec.get("user") or "", spec.get("uid") or "", tuple(spec.get("groups") or ()), spec.get("extra") or {}
            )
        resource = field_dict(spec, "resourceAttributes")
        non_resource = field_dict(spec, "nonResourceAttributes")
        if bool(resource) == bool(non_resource):
            raise errors.invalid(
                kind,
                "",
                [
                    {
                        "reason": "FieldValueRequired",
                        "field": "spec.resourceAttributes",
                        "message": "Required value: exactly one of nonResourceAttributes or "
                        "resourceAttributes must be specified",
                    }
                ],
                rt.group,
            )
        if resource:
            attrs = Attributes(
                subject,
                resource.get("verb", ""),
                True,
                resource.get("group", ""),
                resource.get("version", ""),
                resource.get("resource", ""),
                resource.get("subresource", ""),
                resource.get("name", ""),
                resource.get("namespace", ""),
            )
        else:
            attrs = Attributes(subject, non_resource.get("verb", ""), False, path=non_resource.get("path", ""))
        allowed, reason = self.authorizer.authorize(attrs)
        status = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return {**out, "spec": spec, "status": status}

    def token_for(self, namespace: str, name: str, expiration_seconds: int = DEFAULT_EXPIRATION) -> str:
        """A token for ServiceAccount ``namespace/name``, as the TokenRequest API issues it."""
        request = {"kind": "TokenRequest", "spec": {"expirationSeconds": expiration_seconds}}
        return self._token_request(namespace, name, request)["status"]["token"]

    def _token_request(self, namespace: str, name: str, body: Any) -> dict:
        if not isinstance(body, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type TokenRequest)")
        if body.get("kind") not in (None, "TokenRequest"):
            raise errors.bad_request(
                f"the kind in the data ({body.get('kind')}) does not match the expected kind (TokenRequest)"
            )
        sa = self.store.get(SERVICE_ACCOUNTS, namespace, name)
        if sa is None:
            raise errors.not_found(SERVICE_ACCOUNTS, name)
        spec = field_dict(body, "spec")
        expiration = spec.get("expirationSeconds")
        if expiration is None:
            expiration = DEFAULT_EXPIRATION
        if not isinstance(expiration, int) or isinstance(expiration, bool):
            raise errors.bad_request("spec.expirationSeconds must be an integer")
        if expiration < MIN_EXPIRATION:
            raise errors.invalid(
                "TokenRequest",
                "",
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "spec.expirationSeconds",
                        "message": f"Invalid value: {expiration}: may not specify a duration less than 10 minutes",
                    }
                ],
                "authentication.k8s.io",
            )
        if expiration > 2**32:
            raise errors.invalid(
                "TokenRequest",
                "",
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "spec.expirationSeconds",
                        "message": f"Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds",
                    }
                ],
                "authentication.k8s.io",
            )
        audiences = spec.get("audiences") or [AUDIENCE]
        now = int(self.clock())
        info: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}}
        bound = spec.get("boundObjectRef")
        if isinstance(bound, dict) and bound:
            kind = field_str(bound, "kind")
            resource = {"Pod": "pods", "Secret": "secrets", "Node": "nodes"}.get(kind)
            if resource is None or bound.get("apiVersion", "v1") != "v1":
                raise errors.bad_request(
                    f"cannot bind token to object of type {bound.get('apiVersion', '')}, Kind={kind}"
                )
            obj = self.store.get(resource, None if kind == "Node" else namespace, bound.get("name", ""))
            if obj is None:
                raise errors.not_found(resource, bound.get("name", ""))
            if bound.get("uid") and bound["uid"] != obj["metadata"]["uid"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource} "{bound.get("name")}": the UID in the '
                    f"bound object reference ({bound['uid']}) does not match the UID in record. The "
                    "object might have been deleted and then recreated",
                )
            if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != name:
                raise errors.bad_request(
                    f'cannot bind token for serviceaccount "{name}" to pod running with different serviceaccount name.'
                )
            info[kind.lower()] = {"name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
        claims = {
            "aud": audiences,
            "exp": now + expiration,
            "iat": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": info,
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{name}",
        }
        token = self.tokens.issue(claims)
        expires = rfc3339(now + expiration)
        meta = {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": rfc3339(now),
        }
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": meta,
            "spec": {
                "audiences": audiences,
                "expirationSeconds": expiration,
                "boundObjectRef": bound if isinstance(bound, dict) and bound else None,
            },
            "status": {"token": token, "expirationTimestamp": expires},
        }


def admin_kubeconfig_user(material: SecureMaterial) -> dict:
    """The kubeconfig user entry of the cluster admin."""
    return {"token": material.admin_token}


def _path_resource(path: str) -> tuple[str, str, str, str, str, str] | None:
    """(group, version, namespace, resource, name, subresource) of a resource path, read as RequestInfo
    reads it (k8s.io/apiserver request/requestinfo.go), or None for a path naming no resource."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:
        namespace = rest[1]
    name = rest[1] if len(rest) > 1 else ""
    return group, version, namespace, rest[0], name, "/".join(rest[2:])


def _path_verb(method: str, name: str) -> str:
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in verbs:
        return verbs[method]
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return "get" if name else "list"
