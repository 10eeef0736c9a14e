"""The images ``scripts/testenv build`` makes beside the Go compiles (stdlib only).

The node's Ray image and gitray's own (built from the Dockerfile; the in-cluster tests run it)
are mostly downloads and file copies (debootstrap, pip): they are built, one after the other,
on a thread of their own while the Go compiles use the CPUs (docs/testenv.md).
"""

from __future__ import annotations

import threading
import time

from testenv import gitray_image, images
from testenv.build import BuildError, Layout
from testenv.timings import note_build

__all__ = ["ImageLane"]


class ImageLane:
    """The missing images, built on a thread of their own; its error is raised again by
    ``finish``."""

    def __init__(self, lay: Layout, timings: dict[str, float]) -> None:
        self.lay, self.timings = lay, timings
        self.ray_cached = images.ray_image_path(lay.root).is_file()
        self.gitray_cached = gitray_image.image_archive_path(lay.root).is_file()
        self.started = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._body, name="build-images", daemon=True)

    def start(self) -> None:
        if not (self.ray_cached and self.gitray_cached):
            self.started = True
            self._thread.start()

    def join(self) -> None:
        if self.started:
            self._thread.join()

    def finish(self) -> None:
        """After ``join``: a line for each image that was cached, then the lane's error."""
        if self.ray_cached:
            print(f"Ray image {', '.join(images.RAY_TAGS)}: cached")
            note_build("ray-image", None)
        if self.gitray_cached:
            print(f"gitray image {gitray_image.image_tag()}: cached")
            note_build("gitray-image", None)
        if self.error is not None:
            raise self.error

    def _body(self) -> None:
        try:
            if not self.ray_cached:
                self._ray_image()
            if not self.gitray_cached:
                self._gitray_image()
        except BaseException as exc:  # handed to the main thread
            self.error = exc

    def _ray_image(self) -> None:
        root = self.lay.root
        print(f"Ray image {', '.join(images.RAY_TAGS)}: building, beside the compiles (log: "
              f"{images.ray_work_dir(root)}/build.log) ...", flush=True)
        t0 = time.monotonic()
        try:
            images.build_ray_image(root, say=lambda m: print(m, flush=True))
        except images.ImageError as exc:
            raise BuildError(str(exc)) from None
        self.timings["ray-image"] = round(time.monotonic() - t0, 1)
        print(f"Ray image: built in {self.timings['ray-image']:.0f}s", flush=True)
        note_build("ray-image", self.timings["ray-image"])

    def _gitray_image(self) -> None:
        t0 = time.monotonic()
        try:
            gitray_image.install_packages(say=lambda m: print(m, flush=True))
            gitray_image.build_gitray_image(self.lay.root, say=lambda m: print(m, flush=True))
        except gitray_image.ImageError as exc:
            raise BuildError(f"gitray image: {exc}") from None
        self.timings["gitray-image"] = round(time.monotonic() - t0, 1)
        note_build("gitray-image", self.timings["gitray-image"])
