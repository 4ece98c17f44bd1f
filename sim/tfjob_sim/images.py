"""Container images on the simulator's process runtime: which local environment stands for which image.

Why: a manifest written for a real cluster names an image (``tensorflow/tensorflow:2.21.0``) and a command
relative to it (``python /opt/program/train.py``). The process runtime cannot pull and unpack images; what it
can do is run the command in an environment on this machine that has what the image would have: a
virtualenv, or any directory with a ``bin`` of programs. ``tfjob-controller sim --image IMAGE=DIR`` (or
``SimConfig(image_map=...)``) says which; the kubelet (``tfjob_sim.kubelet.NodeAgent.ensure_image``) puts
``DIR/bin`` first on the container's PATH when the pod's image is one of them, and reports an image nobody
mapped as kubelet reports an image that is not in any registry.

Contract:
- :func:`normalize` is the reference as the container runtime resolves it (Docker's normalisation): no
  registry means ``docker.io``, a one-component Docker Hub name is under ``library/``, no tag and no digest
  means ``:latest``; so ``tensorflow/tensorflow:2.21.0``, ``docker.io/tensorflow/tensorflow:2.21.0`` and
  ``index.docker.io/tensorflow/tensorflow:2.21.0`` are one image, as are ``python``, ``python:latest`` and
  ``docker.io/library/python:latest``. A reference that does not parse raises :class:`InvalidReference`
  with the runtime's words (kubelet: ``InvalidImageName``).
- :class:`ImageMap` holds the mapping by normalised reference; every directory must exist and have a ``bin``
  directory (:class:`ValueError` otherwise, at configuration time rather than at the first pod).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"

# The grammar of github.com/distribution/reference (domain, path components, tag, digest).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_HEX_ID = re.compile(r"^[a-f0-9]{64}$")


class InvalidReference(ValueError):
    """The image reference does not parse (the runtime's message, as kubelet quotes it)."""


def _split_domain(name: str) -> tuple[str, str]:
    """(registry, repository path) as Docker's splitDockerDomain: the first component is a registry only
    when it has a dot or a port or is ``localhost`` (or has capitals, which no repository path may)."""
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost" and first.lower() == first):
        domain, path = DEFAULT_DOMAIN, name
    else:
        domain, path = first, rest
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = OFFICIAL_PREFIX + path
    return domain, path


def normalize(reference: str) -> str:
    """The fully qualified reference, with ``:latest`` when it has neither tag nor digest.

    Raises :class:`InvalidReference` when it does not parse."""
    if not reference:
        raise InvalidReference("repository name must have at least one component")
    if _HEX_ID.match(reference):
        raise InvalidReference(f"invalid repository name ({reference}), cannot specify 64-byte hexadecimal strings")
    name, _, _ = reference.partition("@")
    name_part = name
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name_part = name[: len(name) - len(last) + last.index(":")]
    domain, path = _split_domain(name_part)
    if path.lower() != path:
        raise InvalidReference(f"invalid reference format: repository name ({path}) must be lowercase")
    rest = reference[len(name_part) :]  # ":tag", "@digest", ":tag@digest" or ""
    match = _REFERENCE.match(f"{domain}/{path}{rest}")
    if match is None:
        raise InvalidReference("invalid reference format")
    if match.group("tag") is None and match.group("digest") is None:
        rest = f":{DEFAULT_TAG}"
    return f"{domain}/{path}{rest}"


def parse_mapping(text: str) -> tuple[str, str]:
    """``IMAGE=DIR`` as the command line gives it: (image, directory). Raises ValueError."""
    image, sep, directory = text.partition("=")
    if not sep or not image or not directory:
        raise ValueError(f"expected IMAGE=DIR, got {text!r}")
    return image, directory


class ImageMap:
    """Local environments by image; see the module docstring."""

    def __init__(self, mapping: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._dirs: dict[str, Path] = {}
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        for image, directory in items:
            try:
                key = normalize(image)
            except InvalidReference as exc:
                raise ValueError(f"image {image!r}: {exc}") from None
            path = Path(directory).absolute()
            if not path.is_dir():
                raise ValueError(f"image {image!r}: {directory} is not a directory")
            if not (path / "bin").is_dir():
                raise ValueError(
                    f"image {image!r}: {directory} has no bin directory (a virtualenv or a prefix has one)"
                )
            self._dirs[key] = path

    def __bool__(self) -> bool:
        return bool(self._dirs)

    def __len__(self) -> int:
        return len(self._dirs)

    def lookup(self, image: str) -> Path | None:
        """The directory standing for ``image``, or None when none does.

        Raises :class:`InvalidReference` when ``image`` does not parse."""
        return self._dirs.get(normalize(image))


@dataclass(frozen=True)
class ImageCheck:
    """The kubelet's verdict on a container's image before the container is created
    (tfjob_sim.kubelet.NodeAgent.ensure_image)."""

    directory: str | None = None  # the local environment standing for the image; None: this machine as it is
    waiting: tuple[str, str] | None = None  # (reason, message): the container cannot be created now
    retry_at: float | None = None  # with ``waiting``: when to try again (event-loop time)
