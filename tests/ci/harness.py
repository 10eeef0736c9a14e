"""Run gitray's CI integrations as the CI systems would, on this machine: the GitHub Action's
composite steps (``action.yml``) and the GitLab template's job script
(``ci/gitlab/gitray-plan.yml``), each with bash and the environment the CI system sets. Does
I/O (files, git, subprocesses).

Only what the real files say runs: the harness parses them, substitutes the expressions it
knows (``${{ inputs.* }}``, ``${{ github.token }}``, ``${{ steps.*.outputs.* }}``;
GitLab's ``$[[ inputs.* ]]``) and fails on any other, so a step it cannot run faithfully is a
failure, never a silent skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples-repo"
_GH_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_GL_EXPR = re.compile(r"\$\[\[\s*(.*?)\s*\]\]")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def base_env(tmp: Path, wheelhouse: Path) -> dict[str, str]:
    """A clean environment: this Python first on PATH, pip offline from the wheelhouse."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home), "LANG": "C.UTF-8", "KUBECONFIG": str(tmp / "no-kubeconfig"),
            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}


@dataclass
class StepRun:
    id: str
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    steps: list[StepRun]
    outputs: dict[str, str]

    @property
    def returncode(self) -> int:
        return self.steps[-1].returncode

    @property
    def stdout(self) -> str:
        return "".join(s.stdout for s in self.steps)

    @property
    def stderr(self) -> str:
        return "".join(s.stderr for s in self.steps)


def read_outputs(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT``: ``name=value`` lines, or ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, _, value = line.partition("=")
        out[name] = value
        i += 1
    return out


def load_action(path: Path) -> dict[str, Any]:
    data = YAML(typ="safe", pure=True).load(path.read_text())
    assert isinstance(data, dict)
    return data


def run_action(action_dir: Path, workspace: Path, inputs: Mapping[str, str],
               env: Mapping[str, str], github: Mapping[str, str]) -> ActionRun:
    """Run every step of the composite action in ``action_dir`` as the runner does
    (``bash --noprofile --norc -eo pipefail``), stopping at the first that fails."""
    action = load_action(action_dir / "action.yml")
    assert action["runs"]["using"] == "composite"
    declared = action.get("inputs") or {}
    assert set(inputs) <= set(declared), f"unknown inputs {set(inputs) - set(declared)}"
    steps_outputs: dict[str, dict[str, str]] = {}
    token = github["token"]

    def expr(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name == "github.token":
                return token
            if name.startswith("inputs."):
                key = name.removeprefix("inputs.")
                if key in inputs:
                    return inputs[key]
                return expr(str(declared[key].get("default", "")))
            parts = name.split(".")
            if len(parts) == 4 and parts[0] == "steps" and parts[2] == "outputs":
                return steps_outputs.get(parts[1], {}).get(parts[3], "")
            raise AssertionError(f"the harness does not know the expression {name!r}")
        return _GH_EXPR.sub(one, text)

    runs: list[StepRun] = []
    temp = Path(env["RUNNER_TEMP"])
    for n, step in enumerate(action["runs"]["steps"]):
        assert "uses" not in step, "a step that uses another action cannot run here"
        assert step.get("shell") == "bash"
        assert "if" not in step, "conditions are not evaluated by the harness"
        script = step["run"]
        assert "${{" not in script, "expressions go through env:, never into a script"
        output_file = temp / f"output-{n}"
        output_file.write_text("")
        step_env = {**env, "GITHUB_OUTPUT": str(output_file),
                    "GITHUB_ACTION_PATH": str(action_dir),
                    **{k: expr(str(v)) for k, v in (step.get("env") or {}).items()}}
        script_file = temp / f"step-{n}.sh"
        script_file.write_text(script)
        cwd = workspace / step["working-directory"] if "working-directory" in step else workspace
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail",
                               str(script_file)], cwd=cwd, env=step_env, capture_output=True,
                              text=True, check=False, timeout=600)
        result = StepRun(str(step.get("id", n)), done.returncode, done.stdout, done.stderr,
                         read_outputs(output_file))
        steps_outputs[result.id] = result.outputs
        runs.append(result)
        if done.returncode != 0:
            break
    outputs = {name: expr(str(spec["value"]))
               for name, spec in (action.get("outputs") or {}).items()}
    return ActionRun(runs, outputs)


@dataclass
class JobRun:
    returncode: int
    stdout: str
    stderr: str
    job: dict[str, Any]


def gitlab_job(template: Path, inputs: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The template's one job after GitLab's input interpolation (header ``spec:inputs``,
    ``---``, then the configuration with ``$[[ inputs.NAME ]]``)."""
    header, _, body = template.read_text().partition("\n---\n")
    spec = YAML(typ="safe", pure=True).load(header)["spec"]["inputs"]
    assert set(inputs) <= set(spec), f"unknown inputs {set(inputs) - set(spec)}"
    missing = [k for k, v in spec.items() if (v or {}).get("default") is None and k not in inputs]
    assert not missing, f"required inputs not given: {missing}"

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name.startswith("inputs."), f"unknown interpolation {name!r}"
        key = name.removeprefix("inputs.")
        value = inputs[key] if key in inputs else spec[key]["default"]
        return str(value).lower() if isinstance(value, bool) else str(value)

    config = YAML(typ="safe", pure=True).load(StringIO(_GL_EXPR.sub(one, body)))
    assert isinstance(config, dict) and len(config) == 1
    ((name, job),) = config.items()
    return name, job


def run_gitlab_job(job: Mapping[str, Any], project_dir: Path, env: Mapping[str, str]) -> JobRun:
    """``before_script`` + ``script`` in one bash, as GitLab's shell executor runs them."""
    lines = [*job.get("before_script", []), *job["script"]]
    variables = {k: str(v) for k, v in (job.get("variables") or {}).items()}
    script = "\n".join(["set -eo pipefail", *lines]) + "\n"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=project_dir,
                          env={**env, **variables}, capture_output=True, text=True,
                          check=False, timeout=600)
    return JobRun(done.returncode, done.stdout, done.stderr, dict(job))
