"""gitray settings as values: ``Config`` and its sections, with their defaults. No I/O.

Reading them from ``gitray.yaml`` + flags + environment (schema-checked, with diagnostics)
is ``gitray.parsing.config``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase

__all__ = [
    "CLUSTER_SCOPED_KINDS",
    "CONFIG_API_VERSION",
    "CONFIG_FILE",
    "DEFAULT_KUBERAY_VERSION",
    "OVERRIDES_SOURCE",
    "CapacityMode",
    "CapacitySettings",
    "Config",
    "DashboardMode",
    "FreezeScope",
    "FreezeWindow",
    "HelmRelease",
    "NotificationSettings",
    "RayJobSettings",
    "RayServiceSettings",
    "Receiver",
    "ReceiverType",
    "StatusProvider",
    "StatusSettings",
    "parse_duration",
]

CONFIG_FILE = "gitray.yaml"
CONFIG_API_VERSION = "gitray.io/v1alpha1"
OVERRIDES_SOURCE = "(flags/env)"  # the "path" of diagnostics about overrides
# The KubeRay release whose packaged schemas judge manifests offline (gitray.parsing.kuberay).
DEFAULT_KUBERAY_VERSION = "v1.7.0"

# Kinds that are not namespaced: gitray never applies them (it works inside namespaces only).
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)


class StatusProvider(StrEnum):
    NONE = "none"
    GITHUB = "github"
    GITEA = "gitea"
    GITLAB = "gitlab"
    GIT_NOTES = "git-notes"


class DashboardMode(StrEnum):
    """How gitray reaches Ray dashboards (``--dashboard``)."""

    SERVICE = "service"  # in-cluster DNS of the head Service
    POD_IP = "pod-ip"  # the head pod's IP
    PROXY = "proxy"  # through the API server's service proxy (from outside the cluster)


@dataclass(frozen=True)
class RayServiceSettings:
    cluster_ready_timeout_s: int = 900
    serve_ready_timeout_s: int = 600
    deletion_delay_s: int = 60
    keep_failed_clusters: bool = False


@dataclass(frozen=True)
class RayJobSettings:
    retention: int = 3  # superseded, finished runs kept per RayJob; older ones are deleted
    timeout_s: int = 3600  # bound on wait-job


class CapacityMode(StrEnum):
    """What the capacity pre-flight does with a change that does not fit (gitray.yaml
    ``capacity.quota`` / ``capacity.nodes``)."""

    REFUSE = "refuse"  # a plan error: nothing from the revision is applied
    WARN = "warn"  # a note in the plan; applied anyway
    OFF = "off"  # not checked


@dataclass(frozen=True)
class CapacitySettings:
    quota: CapacityMode = CapacityMode.REFUSE  # a quota keeps the pods from being created
    nodes: CapacityMode = CapacityMode.WARN  # a cluster autoscaler may add nodes


class FreezeScope(StrEnum):
    """What a freeze window holds (gitray.yaml ``freezeWindows[].scope``)."""

    ALL = "all"  # every change (the deletion of a retired cluster excepted)
    NEW_CLUSTERS = "new-clusters"  # changes that create a cluster (upgrades, new workloads)


@dataclass(frozen=True)
class FreezeWindow:
    """A recurring time in which changes are held (``gitray.plans.freeze``)."""

    name: str
    schedule: str  # five-field cron: when the window opens, in ``time_zone``
    duration_s: int
    time_zone: str = "UTC"
    scope: FreezeScope = FreezeScope.ALL


@dataclass(frozen=True)
class StatusSettings:
    provider: StatusProvider = StatusProvider.NONE
    context_prefix: str = "gitray"
    url: str = ""  # API base URL of the Git host
    repository: str = ""  # owner/name (GitHub, Gitea) or project id/path (GitLab)


class ReceiverType(StrEnum):
    WEBHOOK = "webhook"  # generic JSON POST
    SLACK = "slack"  # Slack-compatible incoming webhook (also Mattermost, Rocket.Chat)
    TEAMS = "teams"  # Microsoft Teams incoming webhook (MessageCard)


@dataclass(frozen=True)
class Receiver:
    """Where notifications go. The URL and an optional bearer token come from the daemon's
    environment (``GITRAY_NOTIFY_*`` variables) or files in its notifications directory, never
    from Git; ``url`` inline is for URLs that are no secret."""

    name: str
    type: ReceiverType = ReceiverType.WEBHOOK
    url: str = ""
    url_env: str = ""
    url_file: str = ""
    token_env: str = ""
    token_file: str = ""
    events: tuple[str, ...] = ()  # empty: every event


@dataclass(frozen=True)
class NotificationSettings:
    receivers: tuple[Receiver, ...] = ()


@dataclass(frozen=True)
class HelmRelease:
    """A ``helm:`` entry of gitray.yaml: a chart of the repository rendered with ``helm
    template`` (gitray.plans.helm). Paths are relative to the repository's top."""

    chart: str
    release: str
    namespace: str = ""  # "": the config's defaultNamespace
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    """The validated settings for one repository. Defaults match SPEC §1."""

    paths: tuple[str, ...] = ("**",)
    exclude: tuple[str, ...] = ()
    default_namespace: str = "default"
    allowed_namespaces: tuple[str, ...] = ("*",)
    prune: bool = True
    allow_empty: bool = False
    supporting_kinds: tuple[str, ...] = ("ConfigMap",)
    instance: str = "gitray"  # value of gitray.io/instance; separates gitrays sharing a cluster
    max_parallel: int = 4
    # path globs ([<Kind>:]<glob>) whose values plans never show (gitray.plans.sensitive)
    sensitive_fields: tuple[str, ...] = ()
    kuberay_version: str = DEFAULT_KUBERAY_VERSION  # the schemas used when no cluster is read
    rayservice: RayServiceSettings = field(default_factory=RayServiceSettings)
    rayjob: RayJobSettings = field(default_factory=RayJobSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    freeze_windows: tuple[FreezeWindow, ...] = ()
    helm: tuple[HelmRelease, ...] = ()  # charts rendered with helm template

    def allows(self, namespace: str) -> bool:
        """Whether ``namespace`` matches ``allowedNamespaces`` (fnmatch globs, case-sensitive):
        the one test of it for loading, planning and reading the cluster."""
        return any(fnmatchcase(namespace, glob) for glob in self.allowed_namespaces)

    def literal_namespaces(self) -> frozenset[str]:
        """The allowed namespaces named without a wildcard."""
        return frozenset(g for g in self.allowed_namespaces if not set(g) & set("*?["))


_DURATION = re.compile(r"^(?=[0-9])(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")


def parse_duration(value: int | str) -> int:
    """Seconds from ``90`` or ``"90s"``, ``"10m"``, ``"1h30m"`` (already schema-checked)."""
    if isinstance(value, int):
        return value
    match = _DURATION.match(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a duration (use 90, 90s, 10m or 1h)")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


