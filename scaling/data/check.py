"""Whether a data folder can be trained on here, checked before any training starts."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Dict, List, Optional

from scaling.errors import ScalingError
from scaling.workers.input_data import SUFFIXES

FORMAT = "imagefolder"
MANIFEST = "manifest.json"
JPEG_START = b"\xff\xd8"


def read_manifest(data) -> Optional[Dict]:
    """DATA/manifest.json, or None where there is none; a one-line error when it is
    unreadable."""
    path = Path(data) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ScalingError(f"cannot read {path}: {error}") from None
    if not isinstance(manifest, dict):
        raise ScalingError(f"{path} is not a make-data manifest (a JSON object)")
    return manifest


def _unreadable(data, reason) -> ScalingError:
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return ScalingError(f"data folder {data} is not readable on this node ({node}): {reason}")


def _jpegs(folder: Path) -> List[str]:
    return sorted(entry.name for entry in os.scandir(folder)
                  if entry.is_file() and entry.name.lower().endswith(SUFFIXES))


def _first_bytes(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read(len(JPEG_START))


def check_data_dir(data) -> Dict:
    """The manifest of DATA when it has one, else what its tree holds (format, images,
    classes, per_class counts), once DATA is readable here, every ``DATA/train/<class>/``
    folder holds JPEG files and their counts are the manifest's; otherwise a one-line error."""
    root = Path(data)
    if not root.is_dir():
        raise _unreadable(data, "no such folder")
    train = root / "train"
    try:
        classes = sorted(entry.name for entry in os.scandir(train) if entry.is_dir()) \
            if train.is_dir() else []
        files = {name: _jpegs(train / name) for name in classes}
        for name, names in files.items():
            if names and _first_bytes(train / name / names[0]) != JPEG_START:
                raise ScalingError(f"{train / name / names[0]} is not a JPEG file")
    except OSError as error:
        raise _unreadable(data, error) from None
    per_class = {name: len(names) for name, names in files.items()}
    if not any(per_class.values()):
        raise ScalingError(f"no train/<class>/*.jpg files under {data}: make a dataset with "
                           "`scaling make-data`")
    empty = [name for name, count in per_class.items() if not count]
    if empty:
        raise ScalingError(f"class folder {train / empty[0]} holds no .jpg files: every class "
                           "needs at least one")
    manifest = read_manifest(root)
    if manifest is None:
        return {"format": FORMAT, "images": sum(per_class.values()), "classes": len(per_class),
                "per_class": per_class}
    if manifest.get("per_class") != per_class:
        raise ScalingError(f"data folder {data} holds {sum(per_class.values())} images in "
                           f"{len(per_class)} classes, but its {MANIFEST} says "
                           f"{manifest.get('images')} in {manifest.get('classes')}")
    return manifest
