"""Adapters that run a renderer program on a revision's files (``kustomize build``)."""
