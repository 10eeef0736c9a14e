"""Loading a repository snapshot: every rule and every hostile input, with exact locations."""

from __future__ import annotations

import importlib
import json
import textwrap
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitray.core.model import Diagnostic, ObjectKey, SourceLocation
from gitray.core.snapshot import MAX_FILE_BYTES, MAX_FILES, MAX_TOTAL_BYTES, RepoFile, Snapshot
from gitray.parsing import yamlsafe, yamlwalk
from gitray.parsing.yamlwalk import MAX_NODES
from gitray.plans import load as load_module
from gitray.plans.load import (
    MAX_DIAGNOSTICS_PER_FILE,
    MAX_TOTAL_NODES,
    LoadMemo,
    LoadResult,
    load_snapshot,
)


@pytest.fixture(autouse=True, params=["c", "pure"])
def yaml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every case runs with libyaml (ruamel.yaml.clib) and with the pure-Python parser."""
    if request.param == "c":
        # A declared dependency (pyproject.toml): missing means a broken install -> fail.
        importlib.import_module("ruamel.yaml.clib._ruamel_yaml")
    monkeypatch.setattr(yamlsafe, "PARSER", request.param)
    return str(request.param)


SERVE_CONFIG = """\
    applications:
      - name: greeter
        import_path: apps.greeter:app
        route_prefix: /greet
      - name: calc
        import_path: apps.calc:app
        route_prefix: /calc
"""


def service(
    name: str = "text",
    namespace: str | None = "ray-serve",
    serve: str = SERVE_CONFIG,
    extra_meta: str = "",
) -> str:
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return (
        "apiVersion: ray.io/v1\n"
        "kind: RayService\n"
        "metadata:\n"
        f"  name: {name}{ns}{extra_meta}\n"
        "spec:\n"
        "  serveConfigV2: |\n"
        f"{textwrap.indent(textwrap.dedent(serve), '    ')}"
        "  rayClusterConfig:\n"
        "    headGroupSpec:\n"
        "      rayStartParams: {}\n"
        "      template:\n"
        "        spec:\n"
        "          containers:\n"
        "            - name: ray-head\n"
        "              image: rayproject/ray:2.60.0\n"
        "              ports:\n"
        "                - name: dashboard\n"
        "                  containerPort: 8265\n"
    )


CLUSTER = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: batch
  namespace: ray-batch
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
          - name: ray-head
            image: rayproject/ray:2.60.0
"""

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: code
  namespace: ray-jobs
data:
  main.py: print("hi")
"""

CONFIG = """\
apiVersion: gitray.io/v1alpha1
kind: Config
allowedNamespaces: ["ray-*", default]
"""


Files = dict[str, str | bytes | None]


def snapshot(files: Files, problems: dict[str, str] | None = None) -> Snapshot:
    repo_files = []
    for path, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        repo_files.append(RepoFile(path, data, (problems or {}).get(path)))
    return Snapshot("worktree", "test", tuple(repo_files))


def load(files: Files) -> LoadResult:
    return load_snapshot(snapshot(files))


@dataclass(frozen=True)
class Bad:
    """A repository whose loading must report ``where: ...fragment...`` (among others)."""

    files: dict[str, str | bytes | None]
    where: str
    fragment: str


def replaced(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


RULE_CASES = {
    "an unmanaged kind is named at its kind line": Bad(
        {"a.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"},
        "a.yaml:2:1",
        "kind Deployment is not managed by gitray",
    ),
    "a cluster-scoped kind is refused": Bad(
        {"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: ray-x}\n"},
        "ns.yaml:2:1",
        "Namespace is cluster-scoped",
    ),
    "a supporting kind not listed in supportingKinds is refused": Bad(
        {"sa.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ray}\n"},
        "sa.yaml:2:1",
        "add it to supportingKinds",
    ),
    "a Ray kind with an old apiVersion points at apiVersion": Bad(
        {"c.yaml": replaced(CLUSTER, "ray.io/v1", "ray.io/v1alpha1")},
        "c.yaml:1:1",
        "RayCluster must use apiVersion ray.io/v1, not 'ray.io/v1alpha1'",
    ),
    "a supporting kind with a wrong apiVersion": Bad(
        {"cm.yaml": replaced(CONFIGMAP, "apiVersion: v1", "apiVersion: v1beta1")},
        "cm.yaml:1:1",
        "ConfigMap must use apiVersion v1, not 'v1beta1'",
    ),
    "a document without kind": Bad(
        {"c.yaml": "apiVersion: v1\nmetadata: {name: x}\n"}, "c.yaml:1:1", "missing kind"
    ),
    "a document without apiVersion": Bad(
        {"c.yaml": "# comment\nkind: RayCluster\nmetadata: {name: x}\n"},
        "c.yaml:2:1",
        "missing apiVersion",
    ),
    "a document without metadata": Bad(
        {"c.yaml": "apiVersion: ray.io/v1\nkind: RayCluster\nspec: {}\n"},
        "c.yaml:1:1",
        "missing metadata",
    ),
    "metadata without a name": Bad(
        {"c.yaml": replaced(CLUSTER, "  name: batch\n", "")},
        "c.yaml:3:1",
        "missing metadata.name",
    ),
    "a Ray name with capitals is not a DNS-1035 label": Bad(
        {"c.yaml": replaced(CLUSTER, "name: batch", "name: Batch")},
        "c.yaml:4:3",
        "not a valid RayCluster name",
    ),
    "a Ray name starting with a digit is not a DNS-1035 label": Bad(
        {"c.yaml": replaced(CLUSTER, "name: batch", "name: 1batch")},
        "c.yaml:4:3",
        "DNS-1035",
    ),
    "a RayService name over 47 characters": Bad(
        {"s.yaml": service(name="s" * 48)},
        "s.yaml:4:3",
        "is 48 characters; gitray allows at most 47",
    ),
    "a RayJob name over 47 characters": Bad(
        {
            "j.yaml": "apiVersion: ray.io/v1\nkind: RayJob\nmetadata:\n  name: "
            + "j" * 50
            + "\nspec:\n  entrypoint: python x.py\n"
        },
        "j.yaml:4:3",
        "RayJob name",
    ),
    "a ConfigMap name that is not a DNS-1123 subdomain": Bad(
        {"cm.yaml": replaced(CONFIGMAP, "name: code", "name: Code_1")},
        "cm.yaml:4:3",
        "DNS-1123 subdomain",
    ),
    "generateName is not supported": Bad(
        {"c.yaml": replaced(CLUSTER, "  name: batch\n", "  name: batch\n  generateName: b-\n")},
        "c.yaml:5:3",
        "generateName is not supported",
    ),
    "a namespace outside allowedNamespaces": Bad(
        {"gitray.yaml": CONFIG, "c.yaml": replaced(CLUSTER, "ray-batch", "kube-system")},
        "c.yaml:5:3",
        "namespace 'kube-system' is not in allowedNamespaces (ray-*, default)",
    ),
    "a defaulted namespace outside allowedNamespaces": Bad(
        {
            "gitray.yaml": CONFIG.replace("default]", "ray-prod]"),
            "c.yaml": replaced(CLUSTER, "  namespace: ray-batch\n", ""),
        },
        "c.yaml:3:1",
        "namespace 'default' (from defaultNamespace) is not in allowedNamespaces",
    ),
    "an invalid namespace name": Bad(
        {"c.yaml": replaced(CLUSTER, "ray-batch", "Ray_Batch")},
        "c.yaml:5:3",
        "not a valid namespace name",
    ),
    "a wave that is not an integer": Bad(
        {"s.yaml": service(extra_meta='\n  annotations:\n    gitray.io/wave: "first"')},
        "s.yaml:7:5",
        'gitray.io/wave must be an integer such as "1"',
    ),
    "an unquoted wave is not a string annotation": Bad(
        {"s.yaml": service(extra_meta="\n  annotations:\n    gitray.io/wave: 2")},
        "s.yaml:7:5",
        "metadata.annotations.gitray.io/wave must be a string; quote the value",
    ),
    "a prune opt-out other than disabled or enabled": Bad(
        {"s.yaml": service(extra_meta='\n  annotations:\n    gitray.io/prune: "false"')},
        "s.yaml:7:5",
        'annotation gitray.io/prune must be "disabled" (keep the workload when it leaves Git) '
        'or "enabled", not \'false\'',
    ),
    "a label value that is not a string": Bad(
        {"s.yaml": service(extra_meta="\n  labels:\n    enabled: true")},
        "s.yaml:7:5",
        "metadata.labels.enabled must be a string",
    ),
    "the same identity in two files names both places": Bad(
        {"a.yaml": CLUSTER, "b.yaml": "# again\n" + CLUSTER},
        "b.yaml:2:1",
        "RayCluster ray-batch/batch is defined twice: here and at a.yaml:1:1",
    ),
    "an explicit namespace equal to the default one is the same identity": Bad(
        {
            "a.yaml": replaced(CLUSTER, "ray-batch", "default"),
            "b.yaml": replaced(CLUSTER, "  namespace: ray-batch\n", ""),
        },
        "b.yaml:1:1",
        "defined twice: here and at a.yaml:1:1",
    ),
    "a CRD schema type error points at the field": Bad(
        {"s.yaml": replaced(service(), "containerPort: 8265", 'containerPort: "http"')},
        "s.yaml:25:19",
        "spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].ports[0].containerPort:"
        " 'http' is not of type 'integer'",
    ),
    "an unknown field is named with a suggestion": Bad(
        {"c.yaml": replaced(CLUSTER, "rayStartParams: {}", "rayStartParam: {}")},
        "c.yaml:8:5",
        "unknown field 'rayStartParam' (did you mean 'rayStartParams'?)",
    ),
    "a missing required CRD field": Bad(
        {"c.yaml": CLUSTER.split("    template:", maxsplit=1)[0]},
        "c.yaml:7:3",
        "spec.headGroupSpec: 'template' is a required property",
    ),
    "a RayService without rayClusterConfig": Bad(
        {"s.yaml": service().split("  rayClusterConfig:")[0]},
        "s.yaml:6:1",
        "spec.rayClusterConfig is required",
    ),
    "a RayService without serveConfigV2": Bad(
        {"s.yaml": replaced(service(), "  serveConfigV2: |\n", "  serveConfigV3: |\n")},
        "s.yaml:6:1",
        "spec.serveConfigV2 is required",
    ),
    "serveConfigV2 written as a mapping instead of a string": Bad(
        {
            "s.yaml": replaced(
                service(),
                "  serveConfigV2: |\n",
                "  serveConfigV2:\n    applications: []\n  x: |\n",
            )
        },
        "s.yaml:7:3",
        "spec.serveConfigV2 must be a string holding YAML",
    ),
    "serveConfigV2 that is not YAML reports the inner line in the file": Bad(
        {"s.yaml": service(serve="applications:\n  - name: [unclosed\n  - name: b\n")},
        "s.yaml:10:13",
        "spec.serveConfigV2: YAML syntax error",
    ),
    "serveConfigV2 without applications": Bad(
        {"s.yaml": service(serve="proxy_location: EveryNode\n")},
        "s.yaml:7:3",
        "spec.serveConfigV2: needs a non-empty 'applications' list",
    ),
    "serveConfigV2 with an empty applications list": Bad(
        {"s.yaml": service(serve="applications: []\n")},
        "s.yaml:8:5",
        "needs a non-empty 'applications' list",
    ),
    "serveConfigV2 that is a list": Bad(
        {"s.yaml": service(serve="- a\n- b\n")},
        "s.yaml:8:5",
        "must be a mapping with an 'applications' list",
    ),
    "a Serve application without import_path": Bad(
        {"s.yaml": service(serve="applications:\n  - name: a\n    route_prefix: /a\n")},
        "s.yaml:9:9",
        "applications[0] needs an import_path",
    ),
    "a malformed import_path": Bad(
        {"s.yaml": service(serve="applications:\n  - import_path: not a path\n")},
        "s.yaml:9:9",
        "applications[0].import_path 'not a path' is not 'module:attribute'",
    ),
    "two Serve applications both named default": Bad(
        {
            "s.yaml": service(
                serve="applications:\n  - import_path: a:app\n    route_prefix: /a\n"
                "  - import_path: b:app\n    route_prefix: /b\n"
            )
        },
        "s.yaml:11:9",
        "application name 'default' is used twice (applications[0] has it too)",
    ),
    "two Serve applications both on the default route prefix": Bad(
        {
            "s.yaml": service(
                serve="applications:\n  - name: a\n    import_path: a:app\n"
                "  - name: b\n    import_path: b:app\n"
            )
        },
        "s.yaml:11:9",
        "route_prefix '/' (the default) is used twice (applications[0] has it too)",
    ),
    "a route prefix ending with a slash": Bad(
        {"s.yaml": service(serve=SERVE_CONFIG.replace("/calc", "/calc/"))},
        "s.yaml:14:9",
        "applications[1].route_prefix must not end with '/'",
    ),
    "a route prefix with a wildcard": Bad(
        {"s.yaml": service(serve=SERVE_CONFIG.replace("/calc", "/calc/{x}"))},
        "s.yaml:14:9",
        "cannot contain '{' or '}'",
    ),
    "two Serve applications with the same route prefix": Bad(
        {"s.yaml": service(serve=SERVE_CONFIG.replace("/calc", "/greet"))},
        "s.yaml:14:9",
        "route_prefix '/greet' is used twice",
    ),
    "a route prefix without a leading slash": Bad(
        {"s.yaml": service(serve=SERVE_CONFIG.replace("/calc", "calc"))},
        "s.yaml:14:9",
        "applications[1].route_prefix must start with '/'",
    ),
    "a quoted serveConfigV2 reports its inner line at the key": Bad(
        {
            "s.yaml": replaced(
                service(serve="applications: [{import_path: a:b}]\n"),
                "  serveConfigV2: |\n    applications: [{import_path: a:b}]\n",
                '  serveConfigV2: "applications:\\n  - {name: a, import_path: x}\\n"\n',
            )
        },
        "s.yaml:7:3",
        "spec.serveConfigV2 (its line 2): applications[0].import_path 'x' is not",
    ),
    "ConfigMap data must be strings": Bad(
        {"cm.yaml": CONFIGMAP + "  replicas: 3\n"},
        "cm.yaml:8:3",
        "data.replicas must be a string; quote the value",
    ),
    "a document that is a list": Bad(
        {"l.yaml": "# header\n- a\n- b\n"}, "l.yaml:2:1", "a manifest must be a mapping"
    ),
    "a document that is a plain string": Bad(
        {"l.yaml": "just text\n"}, "l.yaml:1:1", "not a str"
    ),
}

BILLION_LAUGHS = 'lol: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"l{i}: &a{i} [" + ",".join([f"*a{i - 1}" if i else "*a"] * 9) + "]\n" for i in range(12)
)
QUADRATIC_BLOWUP = "a: &a [" + ",".join(["x"] * 2000) + "]\nb: [" + ",".join(["*a"] * 2000) + "]\n"

HOSTILE_CASES = {
    # kustomizations (gitray/plans/kustomize.py): refused before any kustomize runs; the
    # renders themselves (huge output, memory, time) are in tests/unit/plans/test_kustomize.py
    "a kustomization escaping the revision": Bad(
        {"k/kustomization.yaml": "resources: [../../etc]\n"}, "k/kustomization.yaml:1:13",
        "leaves the repository"),
    "a remote kustomize base": Bad(
        {"k/kustomization.yaml": "resources: ['https://example.com/base']\n"},
        "k/kustomization.yaml:1:13", "remote base"),
    "a kustomization cycle": Bad(
        {"a/kustomization.yaml": "resources: [../b]\n",
         "b/kustomization.yaml": "resources: [../a]\n"},
        "a/kustomization.yaml:1:1", "a cycle of kustomizations"),
    "a kustomize exec plugin": Bad(
        {"k/kustomization.yaml": "transformers: [plugin.yaml]\n"}, "k/kustomization.yaml:1:1",
        "transformer plugins are off"),
    "a billion-laughs alias bomb": Bad(
        {"bomb.yaml": BILLION_LAUGHS}, "bomb.yaml:6:10", "aliases expand to more than 100000 nodes"
    ),
    "a quadratic alias blow-up": Bad(
        {"q.yaml": QUADRATIC_BLOWUP}, "q.yaml:2:", "aliases expand to more than"
    ),
    "an alias that contains itself": Bad(
        {"r.yaml": "a: &a\n  b: *a\n"}, "r.yaml:2:6", "alias *a refers to a node that contains it"
    ),
    "an alias to an undefined anchor": Bad(
        {"u.yaml": "a: *nope\n"}, "u.yaml:1:4", "undefined anchor"
    ),
    "flow nesting 100000 levels deep": Bad(
        {"deep.yaml": "a: " + "[" * 100_000}, "deep.yaml:1:67", "nesting deeper than 64 levels"
    ),
    "block nesting 200 levels deep": Bad(
        {"deep.yaml": "".join(f"{' ' * i}k{i}:\n" for i in range(200))},
        "deep.yaml:65:65",
        "nesting deeper than 64 levels",
    ),
    "a file over the size limit": Bad(
        {"big.yaml": b"a: " + b"x" * (50 * 1024 * 1024)},
        "big.yaml:1:1",
        "file is 50.0 MiB, over the 4 MiB limit",
    ),
    "a binary file": Bad(
        {"bin.yaml": b"kind: RayCluster\nx: \x00\x01\x02"},
        "bin.yaml:2:4",
        "binary file (contains NUL bytes)",
    ),
    "a file that is not UTF-8": Bad(
        {"latin1.yaml": "kind: RayCluster\nname: caf\xe9\n".encode("latin-1")},
        "latin1.yaml:2:10",
        "not valid UTF-8 (byte 0xe9)",
    ),
    "a control character": Bad(
        {"ctl.yaml": "kind: Ray\x07Cluster\n"}, "ctl.yaml:1:10", "character #x0007 is not allowed"
    ),
    "duplicate mapping keys": Bad(
        {"dup.yaml": replaced(CLUSTER, "  namespace: ray-batch\n", "  namespace: a\n  name: b\n")},
        "dup.yaml:6:3",
        "duplicate key 'name' (first at line 4)",
    ),
    "a YAML syntax error": Bad(
        {"syn.yaml": "kind: RayCluster\nmetadata: {name: x\nspec: {}\n"},
        "syn.yaml:3:5",
        "YAML syntax error",
    ),
    "a python object tag": Bad(
        {"tag.yaml": "kind: !!python/object/apply:os.system ['true']\n"},
        "tag.yaml:1:7",
        "unsupported YAML tag !!python/object/apply:os.system",
    ),
    "a local tag": Bad({"tag.yaml": "kind: !Ref RayCluster\n"}, "tag.yaml:1:7", "tag !Ref"),
    "an integer too large to be a number": Bad(
        {"n.yaml": "a: " + "9" * 5000 + "\n"}, "n.yaml:1:4", "number too large"
    ),
    "infinity is not a JSON number": Bad(
        {"n.yaml": "a: .inf\n"}, "n.yaml:1:4", ".inf is not a valid JSON number"
    ),
    "a mapping as a mapping key": Bad(
        {"k.yaml": "? {a: 1}\n: b\n"}, "k.yaml:1:3", "a mapping key must be a plain value"
    ),
    "a file name with a newline": Bad(
        {"evil\nname.yaml": CLUSTER}, "evil\\nname.yaml:1:1", "contains control characters"
    ),
    "a symlink out of the repository, not read by the source": Bad(
        {"pw.yaml": None}, "pw.yaml:1:1", "not read: symlink to a path outside the repository"
    ),
}


@pytest.mark.parametrize("case", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_an_invalid_manifest_is_reported_at_its_location(case: Bad) -> None:
    result = load(case.files)
    found = [str(d) for d in result.diagnostics]
    assert any(
        line.startswith(case.where + ":" if case.where.count(":") == 2 else case.where)
        and case.fragment in line
        for line in found
    ), found
    assert result.workloads == ()  # all-or-nothing


@pytest.mark.parametrize("case", HOSTILE_CASES.values(), ids=HOSTILE_CASES.keys())
def test_hostile_input_is_a_clear_diagnostic(case: Bad) -> None:
    problems = {"pw.yaml": "symlink to a path outside the repository"}
    result = load_snapshot(snapshot(case.files, problems))
    found = [str(d) for d in result.diagnostics]
    assert any(line.startswith(case.where) and case.fragment in line for line in found), found
    assert all("\n" not in line for line in found)  # one line each, never a traceback
    assert result.workloads == ()


def test_an_alias_bomb_is_rejected_with_little_memory() -> None:
    tracemalloc.start()
    try:
        result = load({"bomb.yaml": BILLION_LAUGHS * 1})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.diagnostics
    assert peak < 16 * 1024 * 1024


def test_a_python_tag_never_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = f"a: !!python/object/apply:os.system ['touch {marker}']\n"
    result = load({"x.yaml": text})
    assert result.diagnostics
    assert not marker.exists()


def test_too_many_files_stop_the_scan() -> None:
    files: dict[str, str | bytes | None] = {f"f{i:05}.yaml": "" for i in range(MAX_FILES + 1)}
    result = load(files)
    assert [str(d) for d in result.diagnostics] == [
        f"f{MAX_FILES:05}.yaml:1:1: more than {MAX_FILES} YAML files to scan; narrow 'paths' or "
        "add 'exclude' globs in gitray.yaml (this and later files were not read)"
    ]


def test_too_many_bytes_in_total_stop_the_scan() -> None:
    junk = b"\x00" * MAX_FILE_BYTES  # rejected cheaply as binary; one shared buffer
    count = MAX_TOTAL_BYTES // MAX_FILE_BYTES + 1
    files: dict[str, str | bytes | None] = {f"j{i:02}.yaml": junk for i in range(count)}
    result = load(files)
    last = [d for d in result.diagnostics if "in total" in d.message]
    assert [d.location for d in last] == [SourceLocation(f"j{count - 1:02}.yaml")]
    assert "exceed 64 MiB in total" in last[0].message


def test_a_file_with_thousands_of_problems_reports_a_few_and_a_count() -> None:
    # 2 problems on line 1 (no kind, no apiVersion), then a duplicate key on each later line
    result = load({"dup.yaml": "a: 1\n" * 5000})
    assert len(result.diagnostics) == MAX_DIAGNOSTICS_PER_FILE + 1
    assert str(result.diagnostics[-1]) == (
        f"dup.yaml:{MAX_DIAGNOSTICS_PER_FILE}:1: ... and "
        f"{5001 - MAX_DIAGNOSTICS_PER_FILE} more problems in this file"
    )


def test_too_many_yaml_values_in_one_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlsafe, "MAX_NODES", 1000)  # the mechanism, at a size tests afford
    monkeypatch.setattr(yamlwalk, "MAX_NODES", 1000)  # (the fast path and the walk alike)
    result = load({"flow.yaml": "[" + "1," * 5000 + "1]"})
    assert [str(d) for d in result.diagnostics] == [
        "flow.yaml:1:2000: more than 1000 YAML values in one file; split it"
    ]


def test_too_many_yaml_values_in_a_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_module, "MAX_TOTAL_NODES", 2500)
    chunk = "[" + "1," * 998 + "1]"  # 1000 values
    result = load({f"f{i}.yaml": chunk for i in range(5)})
    over = [str(d) for d in result.diagnostics if "in total" in d.message]
    assert over == [
        "f2.yaml:1:1000: the files read hold more than 2500 YAML values in total; narrow "
        "'paths' or add 'exclude' globs in gitray.yaml"
    ]
    # f0, f1 parse (and are lists, not manifests); f3, f4 are never parsed
    assert [d.location.path for d in result.diagnostics] == ["f0.yaml", "f1.yaml", "f2.yaml"]


def test_the_real_value_limits_are_generous_but_bounded() -> None:
    assert 100_000 <= MAX_NODES <= MAX_TOTAL_NODES <= 3_000_000


def test_every_problem_of_a_revision_is_reported_at_once() -> None:
    result = load(
        {
            "a.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
            "b.yaml": "a: *nope\n",
            "c.yaml": CLUSTER,
            "d.yaml": b"\xff",
        }
    )
    assert [d.location.path for d in result.diagnostics] == ["a.yaml", "b.yaml", "d.yaml"]
    assert list(result.diagnostics) == sorted(result.diagnostics)
    assert result.workloads == ()


def test_a_valid_revision_gives_plain_workloads() -> None:
    result = load(
        {
            "gitray.yaml": CONFIG,
            "svc/text.yaml": service(extra_meta='\n  annotations:\n    gitray.io/wave: "-2"'),
            "jobs/code.yml": "---\n# empty documents are skipped\n---\n" + CONFIGMAP + "---\n",
            "c.yaml": replaced(CLUSTER, "  namespace: ray-batch\n", ""),
        }
    )
    assert result.diagnostics == ()
    assert [w.key for w in result.workloads] == [
        ObjectKey("ConfigMap", "ray-jobs", "code"),
        ObjectKey("RayCluster", "default", "batch"),
        ObjectKey("RayService", "ray-serve", "text"),
    ]
    configmap, cluster, text = result.workloads
    assert configmap.source == SourceLocation("jobs/code.yml", 4, 1)
    assert cluster.manifest["metadata"]["namespace"] == "default"
    assert text.wave == -2
    assert text.api_version == "ray.io/v1"
    assert text.source == SourceLocation("svc/text.yaml", 1, 1)
    assert text.spec["serveConfigV2"].startswith("applications:\n  - name: greeter\n")
    # JSON-safe plain values, no parser types
    assert json.loads(json.dumps(text.manifest)) == text.manifest
    assert type(text.manifest) is dict
    assert type(text.manifest["spec"]["rayClusterConfig"]["headGroupSpec"]) is dict


def test_anchors_and_merge_keys_expand_to_plain_values() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n  labels: &l {team: ml}\n"
        "  annotations:\n    <<: *l\n    owner: me\ndata:\n  a: &v 'x'\n  b: *v\n"
    )
    result = load({"m.yaml": text})
    assert result.diagnostics == ()
    (workload,) = result.workloads
    assert workload.manifest["metadata"]["annotations"] == {"team": "ml", "owner": "me"}
    assert workload.manifest["data"] == {"a": "x", "b": "x"}


@pytest.mark.parametrize(
    ("config", "files", "expected"),
    [
        pytest.param(None, {".github/workflows/ci.yaml": "on: push\njobs: {}\n"}, [],
                     id="dot-directories are skipped by default"),
        pytest.param(None, {"README.md": "# hi", "notes.txt": "x"}, [],
                     id="files that are not YAML are ignored"),
        pytest.param("exclude: [legacy]\n", {"legacy/old.yaml": "kind: Deployment\n",
                                             "c.yaml": CLUSTER},
                     ["RayCluster"], id="an excluded directory is not read"),
        pytest.param("paths: [ray]\n", {"ray/c.yaml": CLUSTER, "charts/x.yaml": "kind: Pod\n"},
                     ["RayCluster"], id="paths limit what is scanned"),
        pytest.param("supportingKinds: [ConfigMap, ServiceAccount]\n",
                     {"sa.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ray}\n"},
                     ["ServiceAccount"], id="a listed supporting kind is loaded"),
    ],
)
def test_what_is_scanned(config: str | None, files: dict[str, str | bytes | None],
                         expected: list[str]) -> None:
    if config is not None:
        files = {**files, "gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\n" + config}
    result = load(files)
    assert result.diagnostics == ()
    assert [w.key.kind for w in result.workloads] == expected


def test_an_invalid_gitray_yaml_stops_before_the_manifests() -> None:
    result = load({"gitray.yaml": "apiVersion: gitray.io/v1alpha1\nkind: Config\nprune: maybe\n",
                   "a.yaml": "kind: Deployment\n"})
    assert [str(d) for d in result.diagnostics] == [
        "gitray.yaml:3:1: prune: 'maybe' is not of type 'boolean'"
    ]


def test_a_gitray_yaml_that_was_not_read_is_reported() -> None:
    result = load_snapshot(snapshot({"gitray.yaml": None}, {"gitray.yaml": "file is 5.0 MiB"}))
    assert result.diagnostics == (
        Diagnostic(SourceLocation("gitray.yaml"), "not read: file is 5.0 MiB"),
    )


def test_overrides_apply_to_loading() -> None:
    result = load_snapshot(snapshot({"c.yaml": replaced(CLUSTER, "  namespace: ray-batch\n", "")}),
                           {"defaultNamespace": "ray-team"})
    assert result.diagnostics == ()
    assert result.workloads[0].key.namespace == "ray-team"


@pytest.mark.parametrize(
    ("scalar", "value"),
    [
        ("yes", "yes"), ("on", "on"), ("~", None), ("null", None), ("True", True),
        ("012", 12), ("0o17", 15), ("0x1F", 31), ("-3", -3), ("1e3", 1000.0), ("1.5", 1.5),
        ("'12'", "12"), ('"true"', "true"), ("!!str 12", "12"), ("!!int '12'", 12),
        ("!!float 1", 1.0), ("2024-01-01", "2024-01-01"), ("!!timestamp 2024-01-01", "2024-01-01"),
        ("! 12", "12"), ("1_000", "1_000"),
    ],
)
def test_scalars_follow_the_yaml_1_2_core_schema(scalar: str, value: object) -> None:
    documents, problems = yamlsafe.parse_documents(f"v: {scalar}\n", "s.yaml")
    assert problems == []
    assert documents[0].value == {"v": value}
    assert type(documents[0].value["v"]) is type(value)


@pytest.mark.parametrize(
    ("scalar", "problem"),
    [("!!bool yes", "'yes' is not a valid bool"), ("!!int 1.5", "'1.5' is not a valid int"),
     ("!!null x", "'x' is not a valid null"), ("-.inf", "-.inf is not a valid JSON number"),
     (".NaN", ".NaN is not a valid JSON number"), ("!!set {a}", "unsupported YAML tag !!set")],
)
def test_scalars_without_a_json_value(scalar: str, problem: str) -> None:
    _, problems = yamlsafe.parse_documents(f"v: {scalar}\n", "s.yaml")
    assert [str(p) for p in problems] == [f"s.yaml:1:4: {problem}" + (
        ": manifests are plain YAML (strings, numbers, booleans, null, mappings, lists)"
        if "unsupported" in problem else ""
    ) + ("; quote it" if "JSON number" in problem else "")]


# ---- the per-file memo: a new revision costs what it changed --------------------------------


def test_the_memo_reparses_only_changed_files_and_gives_the_same_result() -> None:
    memo = LoadMemo()
    files: Files = {"gitray.yaml": CONFIG, "a.yaml": service("a"), "b.yaml": service("b"),
                    "c.yaml": CLUSTER}
    first = load_snapshot(snapshot(files), memo=memo)
    assert not first.diagnostics and memo.hits == 0 and len(memo) == 3
    changed = {**files, "b.yaml": service("b", serve=SERVE_CONFIG.replace("/calc", "/c"))}
    second = load_snapshot(snapshot(changed), memo=memo)
    assert memo.hits == 2  # a.yaml and c.yaml; b.yaml changed
    assert second == load_snapshot(snapshot(changed))  # exactly what a cold load gives
    assert second.workloads[0] is first.workloads[0]  # shared, not re-parsed


def test_the_memo_is_keyed_by_the_settings_too() -> None:
    memo = LoadMemo()
    files: Files = {"gitray.yaml": CONFIG, "a.yaml": service("a")}
    assert not load_snapshot(snapshot(files), memo=memo).diagnostics
    narrowed = {**files, "gitray.yaml": CONFIG.replace('"ray-*", ', "")}
    result = load_snapshot(snapshot(narrowed), memo=memo)
    assert memo.hits == 0
    assert [d.message for d in result.diagnostics] == [
        d.message for d in load_snapshot(snapshot(narrowed)).diagnostics]
    assert result.diagnostics  # ray-serve is no longer allowed


def test_the_memo_remembers_problems_and_forgets_files_no_longer_loaded() -> None:
    memo = LoadMemo()
    broken: Files = {"gitray.yaml": CONFIG, "a.yaml": service("a"), "bad.yaml": "a: [1,\n"}
    first = load_snapshot(snapshot(broken), memo=memo)
    again = load_snapshot(snapshot(broken), memo=memo)
    assert again.diagnostics == first.diagnostics != ()
    assert memo.hits == 2
    fixed = {"gitray.yaml": CONFIG, "a.yaml": service("a")}
    load_snapshot(snapshot(fixed), memo=memo)
    assert len(memo) == 1  # bad.yaml's entry is gone with the revision that had it


def test_memoized_files_still_count_against_the_revision_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_module, "MAX_TOTAL_NODES", 2500)
    chunk = "[" + "1," * 998 + "1]"  # 1000 values
    memo = LoadMemo()
    load_snapshot(snapshot({"f0.yaml": chunk, "f1.yaml": chunk}), memo=memo)
    result = load_snapshot(snapshot({f"f{i}.yaml": chunk for i in range(3)}), memo=memo)
    assert memo.hits == 2
    over = [str(d) for d in result.diagnostics if "in total" in d.message]
    assert over == [
        "f2.yaml:1:1000: the files read hold more than 2500 YAML values in total; narrow "
        "'paths' or add 'exclude' globs in gitray.yaml"
    ]
