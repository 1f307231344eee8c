"""``scaling make-data``: a deterministic dataset of real JPEGs to train on."""

from __future__ import annotations

from pathlib import Path

import click

from scaling.cli.output import console
from scaling.data.check import MANIFEST
from scaling.data.make import DataSpec, existing_dataset, make_data
from scaling.execute.runner import progress_bar
from scaling.units import format_bytes


@click.command(name="make-data")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--images", type=int, default=1024, show_default=True,
              help="Images in all, spread evenly over the classes.")
@click.option("--size", type=int, default=256, show_default=True,
              help="Side of each square RGB image, in pixels (8 to 4096).")
@click.option("--classes", type=int, default=8, show_default=True,
              help="Class folders (class000, class001, ...), at most --images.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the pictures: another seed, other pictures.")
@click.option("--quality", type=int, default=90, show_default=True,
              help="JPEG quality, 1 to 95.")
def make_data_command(out, images, size, classes, seed, quality):
    """Write a dataset of real JPEG files to OUT in the ImageFolder layout,
    OUT/train/<class>/<n>.jpg, to train on with --data. Each picture (a colour gradient,
    shapes, blur, texture and noise) is drawn from its own seeded generator, so it compresses
    and decodes like a photograph, and the same arguments give byte-identical files.
    OUT/manifest.json records the arguments, the counts and the total bytes.

    OUT must be absent or empty; where it already holds the dataset of these arguments,
    nothing is written. Exits 0 when done, 2 for bad input."""
    spec = DataSpec(images, size, classes, seed, quality).check()
    found = existing_dataset(out, spec)
    if found is not None:
        console.print(f"{out} already holds this dataset ({spec.arguments()}): nothing to do")
        return
    with progress_bar(console) as progress:
        task = progress.add_task("make-data", total=images)
        manifest = make_data(out, spec, on_image=lambda: progress.advance(task))
    console.print(f"wrote {images} JPEGs of {size} x {size} pixels in {classes} classes, "
                  f"{format_bytes(manifest['total_bytes'])}, to {Path(out) / 'train'}; "
                  f"manifest {Path(out) / MANIFEST}")
