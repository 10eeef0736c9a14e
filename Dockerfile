# syntax=docker/dockerfile:1
# gitray: GitOps for Ray on Kubernetes. `gitray sync` is the entrypoint; see deploy/ for the
# Kubernetes manifests. Build: docker build -t gitray:0.1.0 .   Lint: scripts/lint-dockerfile

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm

# ---- tools: the renderers gitray runs (kustomize, helm), built from the Go module proxy ------
# Pinned to the versions the test environment builds and tests (testenv/kustomize.py,
# testenv/helm.py; tests/integration/test_image.py checks they agree). Static binaries.
FROM ${GO_IMAGE} AS tools
ARG KUSTOMIZE_VERSION=v5.8.2
ARG HELM_VERSION=v4.3.2
ENV CGO_ENABLED=0 \
    GOFLAGS=-trimpath
RUN go install -ldflags="-s -w" "sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}" \
    && go install -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}" \
       "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}" \
    && install -D -m 0755 -t /out "$(go env GOPATH)/bin/kustomize" "$(go env GOPATH)/bin/helm"

# ---- build: install gitray (no test extras) into a virtualenv --------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gitray
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gitray ./gitray
RUN /opt/gitray/bin/pip install --no-cache-dir .

# ---- runtime: Python, git, the virtualenv and the two renderers; nothing else ---------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gitray" \
      org.opencontainers.image.description="GitOps for Ray on Kubernetes: plan, apply and report KubeRay workloads from Git" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# git is what gitray fetches with. Unpinned on purpose: the version is whatever the base image's
# Debian release ships, so rebuilding picks up its security fixes.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A numeric, non-root user (Kubernetes' runAsNonRoot can only verify a numeric UID).
RUN groupadd --system --gid 10001 gitray \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/gitray --create-home \
       --shell /usr/sbin/nologin gitray \
    && install -d -o 10001 -g 10001 /var/cache/gitray

COPY --from=build /opt/gitray /opt/gitray
# On PATH, where gitray looks for them (GITRAY_KUSTOMIZE / GITRAY_HELM name others).
COPY --from=tools /out/kustomize /out/helm /usr/local/bin/
ENV PATH=/opt/gitray/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/gitray \
    GITRAY_CACHE_DIR=/var/cache/gitray

USER 10001:10001
WORKDIR /home/gitray
EXPOSE 8080

# No curl in the image: the health check is a Python one-liner (urlopen raises on non-2xx).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

ENTRYPOINT ["gitray", "sync"]
