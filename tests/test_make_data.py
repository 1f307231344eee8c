"""``scaling make-data OUT``: a deterministic ImageFolder tree of real JPEGs,
``OUT/train/<class>/<n>.jpg``, with ``OUT/manifest.json``; and ``check_data_dir``, which says
before any training whether a data folder can be trained on here.

The command line runs in this process (click's CliRunner)."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from click.testing import CliRunner
from PIL import Image

from scaling.cli import cli
from scaling.data import check_data_dir
from scaling.errors import ScalingError

SMALL = ("--images", 12, "--size", 48, "--classes", 3)


def make_data(out, *args):
    """``scaling make-data OUT ARGS``, with its exit status as ``returncode``."""
    result = CliRunner().invoke(cli, ["make-data", str(out), *map(str, args)],
                                prog_name="scaling")
    result.returncode = result.exit_code
    return result


def make_data_ok(out, *args):
    result = make_data(out, *args)
    assert result.returncode == 0, result.output
    return result


def contents(root):
    """Every file under ``root`` by its relative path, with its bytes."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """12 JPEGs of 48 x 48 pixels in 3 classes."""
    out = tmp_path_factory.mktemp("data") / "small"
    make_data_ok(out, *SMALL)
    return out


def test_the_tree_is_an_imagefolder_of_jpegs_of_the_asked_size(small):
    assert sorted(str(path.relative_to(small)) for path in small.rglob("*.jpg")) == [
        f"train/class{label:03d}/{number:05d}.jpg" for label in range(3) for number in range(4)]
    for path in small.rglob("*.jpg"):
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB" and image.size == (48, 48)


def test_the_manifest_records_the_arguments_counts_and_bytes(small):
    manifest = json.loads((small / "manifest.json").read_text())
    jpegs = list(small.rglob("*.jpg"))
    assert manifest == {
        "format": "imagefolder", "images": 12, "size": 48, "classes": 3, "seed": 0,
        "quality": 90, "total_bytes": sum(path.stat().st_size for path in jpegs),
        "per_class": {"class000": 4, "class001": 4, "class002": 4}}


def test_torchvision_reads_the_tree_as_an_imagefolder(small):
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(small / "train")
    assert dataset.classes == ["class000", "class001", "class002"]
    assert len(dataset) == 12 and dataset[11][1] == 2


def test_images_that_do_not_divide_evenly_go_to_the_first_classes_first(tmp_path):
    make_data_ok(tmp_path, "--images", 7, "--size", 16, "--classes", 3)
    assert json.loads((tmp_path / "manifest.json").read_text())["per_class"] == {
        "class000": 3, "class001": 2, "class002": 2}


def test_the_same_arguments_give_byte_identical_files_and_another_seed_others(small, tmp_path):
    make_data_ok(tmp_path / "again", *SMALL)
    assert contents(tmp_path / "again") == contents(small)
    make_data_ok(tmp_path / "seed1", *SMALL, "--seed", 1)
    again, other = contents(tmp_path / "again"), contents(tmp_path / "seed1")
    assert all(other[name] != again[name] for name in again if name.endswith(".jpg"))


def test_each_picture_differs_and_compresses_like_a_photograph_not_a_flat_colour(small):
    jpegs = [path.read_bytes() for path in small.rglob("*.jpg")]
    assert len(set(jpegs)) == 12
    flat = io.BytesIO()
    Image.new("RGB", (48, 48), (120, 80, 200)).save(flat, "JPEG", quality=90)
    assert min(len(data) for data in jpegs) > 2 * len(flat.getvalue())
    for data in jpegs:
        with Image.open(io.BytesIO(data)) as image:
            low, high = zip(*image.getextrema())
            assert max(high) - min(low) > 100


def test_a_folder_that_holds_the_same_dataset_is_left_as_it_is(small):
    before = {path: path.stat().st_mtime_ns for path in small.rglob("*")}
    result = make_data_ok(small, *SMALL)
    assert "already holds this dataset" in result.output
    assert {path: path.stat().st_mtime_ns for path in small.rglob("*")} == before


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    for fragment in fragments:
        assert fragment in line


@pytest.mark.parametrize("args, fragments", [
    (("--images", 0), ("--images must be a positive integer, got 0",)),
    (("--classes", -2), ("--classes must be a positive integer, got -2",)),
    (("--size", 4), ("--size must be between 8 and 4096 pixels, got 4",)),
    (("--images", 2, "--classes", 3), ("--classes 3 is more than --images 2",)),
    (("--seed", -1), ("--seed must be 0 or a positive integer, got -1",)),
    (("--quality", 100), ("--quality must be between 1 and 95, got 100",)),
])
def test_bad_numbers_get_one_line_naming_the_valid_values(tmp_path, args, fragments):
    assert_one_line_error(make_data(tmp_path / "out", *args), *fragments)
    assert not (tmp_path / "out").exists()


def test_a_folder_with_other_files_or_another_dataset_is_refused(small, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert_one_line_error(make_data(tmp_path, *SMALL),
                          "is not empty and holds no manifest.json")
    assert_one_line_error(make_data(tmp_path / "notes.txt", *SMALL), "notes.txt' is a file")
    assert_one_line_error(make_data(small, "--images", 12, "--size", 64, "--classes", 3),
                          "holds a dataset made with --images 12 --size 48 --classes 3 "
                          "--seed 0 --quality 90")


def test_check_data_dir_gives_the_manifest_of_a_made_tree(small):
    assert check_data_dir(small) == json.loads((small / "manifest.json").read_text())


def test_check_data_dir_counts_a_tree_without_a_manifest(small, tmp_path):
    shutil.copytree(small / "train", tmp_path / "train")
    assert check_data_dir(tmp_path) == {
        "format": "imagefolder", "images": 12, "classes": 3,
        "per_class": {"class000": 4, "class001": 4, "class002": 4}}


def test_check_data_dir_refuses_a_missing_folder(tmp_path):
    with pytest.raises(ScalingError, match="data folder .*/missing is not readable on this "
                                           "node .*: no such folder"):
        check_data_dir(tmp_path / "missing")


def test_check_data_dir_refuses_a_folder_without_jpegs(tmp_path):
    (tmp_path / "train" / "class000").mkdir(parents=True)
    (tmp_path / "train" / "class000" / "00000.png").write_bytes(b"not a jpeg")
    with pytest.raises(ScalingError, match="no train/<class>/\\*.jpg files under"):
        check_data_dir(tmp_path)


def test_check_data_dir_refuses_an_empty_class_and_a_file_that_is_not_a_jpeg(small, tmp_path):
    shutil.copytree(small / "train", tmp_path / "train")
    (tmp_path / "train" / "class003").mkdir()
    with pytest.raises(ScalingError, match="class003 holds no .jpg files"):
        check_data_dir(tmp_path)
    (tmp_path / "train" / "class003" / "00000.jpg").write_text("text")
    with pytest.raises(ScalingError, match="00000.jpg is not a JPEG file"):
        check_data_dir(tmp_path)


def test_check_data_dir_refuses_a_copy_with_fewer_files_than_its_manifest(small, tmp_path):
    shutil.copytree(small, tmp_path / "copy")
    (tmp_path / "copy" / "train" / "class001" / "00003.jpg").unlink()
    with pytest.raises(ScalingError, match="holds 11 images in 3 classes, but its "
                                           "manifest.json says 12 in 3"):
        check_data_dir(tmp_path / "copy")
