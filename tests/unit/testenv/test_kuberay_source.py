"""Where the KubeRay v1.7.0 source is looked for (``testenv.kuberay.beside_repository``):
``../shared/kuberay-v1.7.0`` beside the repository, and for a clean clone in a temporary
directory (CI's `git clone /work/main "$(mktemp -d)"`), beside the repository it was cloned
from. A clean clone of this session found none and built v1.6.2: 28 tests failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testenv.kuberay import FOLDER, beside_repository

IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@localhost")


def git(*args: str) -> None:
    subprocess.run(["git", *IDENTITY, *args], check=True, capture_output=True)


def test_beside_the_repository_first(tmp_path: Path) -> None:
    (tmp_path / FOLDER).mkdir(parents=True)
    git("init", "-q", str(tmp_path / "repo"))
    assert beside_repository(tmp_path / "repo") == tmp_path / FOLDER


def test_a_clone_elsewhere_finds_the_folder_beside_its_origin(tmp_path: Path) -> None:
    (tmp_path / "work" / FOLDER).mkdir(parents=True)
    git("init", "-q", str(tmp_path / "work" / "main"))
    git("-C", str(tmp_path / "work" / "main"), "commit", "-q", "--allow-empty", "-m", "x")
    git("clone", "-q", str(tmp_path / "work" / "main"), str(tmp_path / "tmp" / "clone"))
    assert beside_repository(tmp_path / "tmp" / "clone") == tmp_path / "work" / FOLDER


def test_nowhere_it_is_the_folder_beside_the_repository(tmp_path: Path) -> None:
    git("init", "-q", str(tmp_path / "repo"))  # (no origin)
    assert beside_repository(tmp_path / "repo") == tmp_path / FOLDER
    git("-C", str(tmp_path / "repo"), "remote", "add", "origin", "https://example.invalid/r.git")
    assert beside_repository(tmp_path / "repo") == tmp_path / FOLDER
