"""A deterministic dataset of real JPEG files in the ImageFolder layout.

``OUT/train/<class>/<n>.jpg``: ``images`` pictures of ``size`` x ``size`` RGB pixels spread
evenly over ``classes`` folders (``class000``, ``class001``, ...; the first folders take one
more when the division is not exact), numbered from ``00000.jpg`` in each folder. Each picture
is drawn from its own random generator, seeded by (seed, class, number): a colour gradient with
smooth blotches, ellipses, rectangles and lines, a slight blur, then texture and pixel noise, so
that it compresses and decodes like a photograph rather than a flat colour. The drawing uses
integer arithmetic and Pillow's own filters only, so the same arguments give byte-identical
files with the same Pillow. ``OUT/manifest.json``, written last, records the arguments, the
counts and the total bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Tuple

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from scaling.data.check import FORMAT, MANIFEST, check_data_dir, read_manifest
from scaling.errors import ScalingError, positive_int

MIN_SIZE, MAX_SIZE = 8, 4096
MIN_QUALITY, MAX_QUALITY = 1, 95


@dataclass(frozen=True)
class DataSpec:
    """What ``make-data`` was asked for; two datasets with the same spec are byte-identical."""

    images: int
    size: int
    classes: int
    seed: int = 0
    quality: int = 90

    def check(self) -> "DataSpec":
        """The spec itself, or a one-line error that names the valid values."""
        for name in ("images", "classes"):
            positive_int(f"--{name}", getattr(self, name))
        if not MIN_SIZE <= self.size <= MAX_SIZE:
            raise ScalingError(f"--size must be between {MIN_SIZE} and {MAX_SIZE} pixels, "
                               f"got {self.size}")
        if self.classes > self.images:
            raise ScalingError(f"--classes {self.classes} is more than --images {self.images}: "
                               "every class needs at least one image")
        if self.seed < 0:
            raise ScalingError(f"--seed must be 0 or a positive integer, got {self.seed}")
        if not MIN_QUALITY <= self.quality <= MAX_QUALITY:
            raise ScalingError(f"--quality must be between {MIN_QUALITY} and {MAX_QUALITY}, "
                               f"got {self.quality}")
        return self

    def arguments(self) -> str:
        """The spec as the command line gives it: ``--images 12 --size 48 ...``."""
        return " ".join(f"--{name} {value}" for name, value in asdict(self).items())

    def per_class(self) -> Dict[str, int]:
        """Images in each class folder, by folder name, in order."""
        width = max(3, len(str(self.classes - 1)))
        share, extra = divmod(self.images, self.classes)
        return {f"class{label:0{width}d}": share + (label < extra)
                for label in range(self.classes)}

    def files(self) -> Iterator[Tuple[str, int, int]]:
        """(path under OUT, class index, number in its class) of every image, in order."""
        counts = self.per_class()
        width = max(5, len(str(max(counts.values()) - 1)))
        for label, (name, count) in enumerate(counts.items()):
            for number in range(count):
                yield f"train/{name}/{number:0{width}d}.jpg", label, number


def _blotches(rng: np.random.Generator, size: int, cells: int, spread: int) -> np.ndarray:
    """Smooth colour variation of +-``spread``: a ``cells`` x ``cells`` random grid, resized
    to ``size`` with bicubic interpolation."""
    grid = rng.integers(0, 256, (cells, cells, 3), dtype=np.uint8)
    smooth = Image.fromarray(grid, "RGB").resize((size, size), Image.Resampling.BICUBIC)
    return (np.asarray(smooth, dtype=np.int32) - 128) * spread // 128


def _shapes(image: Image.Image, rng: np.random.Generator) -> None:
    """Ellipses, rectangles and lines of random colours, sizes and places."""
    size = image.width
    pen = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 16))):
        kind = int(rng.integers(0, 3))
        x, y = rng.integers(0, size, 2).tolist()
        half_w, half_h = rng.integers(size // 20 + 1, size // 3 + 2, 2).tolist()
        colour = tuple(rng.integers(0, 256, 3).tolist())
        box = (x - half_w, y - half_h, x + half_w, y + half_h)
        if kind == 0:
            pen.ellipse(box, fill=colour)
        elif kind == 1:
            pen.rectangle(box, fill=colour)
        else:
            pen.line(box, fill=colour, width=int(rng.integers(1, size // 24 + 2)))


def draw_image(size: int, rng: np.random.Generator) -> Image.Image:
    """One ``size`` x ``size`` RGB picture drawn from ``rng``."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.int32)
    dx, dy = rng.integers(-64, 65, 2).tolist()
    along = dx * xs + dy * ys
    along = (along - along.min()) * 1024 // max(int(along.max() - along.min()), 1)
    start, end = rng.integers(0, 256, (2, 3), dtype=np.int32)
    pixels = start + (end - start) * along[..., None] // 1024
    pixels = pixels + _blotches(rng, size, int(rng.integers(3, 7)), 60)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    _shapes(image, rng)
    image = image.filter(ImageFilter.GaussianBlur(size / 256))
    pixels = np.asarray(image, dtype=np.int32)
    pixels = pixels + _blotches(rng, size, max(4, size // 4), int(rng.integers(10, 40)))
    noise = int(rng.integers(4, 14))
    for _ in range(2):
        pixels = pixels + rng.integers(-noise, noise + 1, pixels.shape, dtype=np.int32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def image_rng(seed: int, label: int, number: int) -> np.random.Generator:
    """The generator of image ``number`` of class ``label``: each image has its own."""
    return np.random.default_rng([seed, label, number])


def existing_dataset(out, spec: DataSpec) -> Optional[Dict]:
    """The manifest of OUT when OUT already holds the dataset of ``spec``; None when OUT is
    absent or empty; otherwise a one-line error (OUT is a file, holds other files, or holds a
    dataset made with other arguments)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ScalingError(f"{out} exists and is not a folder")
    try:
        if not path.exists() or not any(path.iterdir()):
            return None
    except OSError as error:
        raise ScalingError(f"cannot read {out}: {error}") from None
    manifest = read_manifest(path)
    if manifest is None:
        raise ScalingError(f"{out} is not empty and holds no {MANIFEST} (other files, or an "
                           "interrupted make-data); remove it or choose another folder")
    made = DataSpec(**{field.name: manifest.get(field.name) for field in fields(DataSpec)})
    if made != spec:
        raise ScalingError(f"{out} holds a dataset made with {made.arguments()}; remove it or "
                           "choose another folder")
    return check_data_dir(path)


def make_data(out, spec: DataSpec, on_image: Callable[[], None] = lambda: None) -> Dict:
    """Write the dataset of ``spec`` into OUT (absent or empty), calling ``on_image`` after each
    file, and then its manifest, which is returned. Where OUT already holds that dataset,
    nothing is written and its manifest is returned."""
    found = existing_dataset(out, spec.check())
    if found is not None:
        return found
    root = Path(out)
    total = 0
    try:
        for name in spec.per_class():
            (root / "train" / name).mkdir(parents=True, exist_ok=True)
        for relative, label, number in spec.files():
            path = root / relative
            draw_image(spec.size, image_rng(spec.seed, label, number)).save(
                path, "JPEG", quality=spec.quality)
            total += path.stat().st_size
            on_image()
        manifest = {"format": FORMAT, **asdict(spec), "total_bytes": total,
                    "per_class": spec.per_class()}
        (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    except OSError as error:
        raise ScalingError(f"cannot write {out}: {error}") from None
    return manifest

