"""Files as text before they are YAML: decoding, byte positions, paths into a document. Pure."""

from __future__ import annotations

from gitray.core.model import Diagnostic, SourceLocation

__all__ = ["JsonPath", "decode_text", "format_path"]

JsonPath = tuple[str | int, ...]


def format_path(path: JsonPath) -> str:
    """``("spec", "workerGroupSpecs", 0, "replicas")`` -> ``spec.workerGroupSpecs[0].replicas``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(document)"


def decode_text(data: bytes, path: str) -> tuple[str | None, Diagnostic | None]:
    """UTF-8 text of a file, or a diagnostic for binary or non-UTF-8 content."""
    nul = data.find(b"\x00")
    if nul >= 0:
        return None, Diagnostic(
            _byte_location(data, nul, path), "binary file (contains NUL bytes); not YAML"
        )
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        return None, Diagnostic(
            _byte_location(data, err.start, path),
            f"not valid UTF-8 (byte 0x{data[err.start]:02x}); save the file as UTF-8",
        )


def _byte_location(data: bytes, offset: int, path: str) -> SourceLocation:
    line_start = data.rfind(b"\n", 0, offset) + 1
    return SourceLocation(path, data.count(b"\n", 0, offset) + 1, offset - line_start + 1)
