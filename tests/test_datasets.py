"""The suite's on-disk data sets and what the loaders share: reproducible, complete, checked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytest_dlperf.child import datasets
from pytest_dlperf.child.datasets import DatasetError, ImageSetSpec, ensure_image_set, make_image_folders
from pytest_dlperf.child.loaders import accuracy_metrics, check_data, balance_of, top_k_correct
from pytest_dlperf.scenario import Scenario, ScenarioError

TINY = ImageSetSpec(num_classes=3, train_per_class=4, val_per_class=2, image_size=16)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_image_folders(TINY, tmp_path_factory.mktemp("data"))


def jpegs(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*.jpg"))


def test_layout_is_class_folders_per_split(tiny):
    assert sorted(p.name for p in (tiny / "train").iterdir()) == ["class_000", "class_001", "class_002"]
    assert len(list((tiny / "train").rglob("*.jpg"))) == 12
    assert len(list((tiny / "val").rglob("*.jpg"))) == 6
    assert datasets.read_spec(tiny) == TINY


def test_same_spec_gives_the_same_bytes_and_a_new_seed_other_bytes(tiny, tmp_path):
    again = make_image_folders(TINY, tmp_path / "a")
    assert jpegs(again) == jpegs(tiny)
    assert all((again / f).read_bytes() == (tiny / f).read_bytes() for f in jpegs(tiny))
    other = make_image_folders(ImageSetSpec(**{**TINY.__dict__, "seed": 1}), tmp_path / "b")
    assert other.name != again.name
    assert (other / jpegs(tiny)[0]).read_bytes() != (tiny / jpegs(tiny)[0]).read_bytes()


def test_complete_data_set_is_reused_not_rewritten(tiny):
    stamp = (tiny / "train" / "class_000" / "000000.jpg").stat().st_mtime_ns
    assert make_image_folders(TINY, tiny.parent) == tiny
    assert (tiny / "train" / "class_000" / "000000.jpg").stat().st_mtime_ns == stamp


def test_incomplete_folder_is_an_error_naming_the_fix(tmp_path):
    (tmp_path / TINY.name).mkdir()
    with pytest.raises(DatasetError, match="delete it and rerun"):
        make_image_folders(TINY, tmp_path)


def test_images_are_learnable_class_patterns(tiny):
    from PIL import Image

    def mean_image(split, cls):
        files = sorted((tiny / split / cls).glob("*.jpg"))
        return np.mean([np.asarray(Image.open(f), dtype=np.float32) for f in files], axis=0)

    # Nearest class mean (from train) classifies every val image: the classes differ in content.
    means = [mean_image("train", f"class_{c:03d}") for c in range(3)]
    for c in range(3):
        for f in sorted((tiny / "val" / f"class_{c:03d}").glob("*.jpg")):
            x = np.asarray(Image.open(f), dtype=np.float32)
            assert int(np.argmin([np.abs(x - m).mean() for m in means])) == c


def test_label_noise_files_a_fixed_share_of_each_class_elsewhere_and_keeps_the_pixels(tiny, tmp_path):
    """A nearest-mean classifier built on the clean set finds each image's pattern class; in the noisy
    set exactly the stated share of val images sits in another class's folder, so the best possible
    top-1 is ``top1_ceiling``; the pixels are those of the clean set."""
    from PIL import Image

    noisy_spec = ImageSetSpec(num_classes=3, train_per_class=4, val_per_class=4, image_size=16, label_noise=0.25)
    clean = make_image_folders(dataclasses.replace(noisy_spec, label_noise=0.0), tmp_path / "clean")
    noisy = make_image_folders(noisy_spec, tmp_path / "noisy")
    assert noisy_spec.top1_ceiling == 0.75 and noisy.name != clean.name

    def contents(folder, split):
        return {f.name: (int(f.parent.name[-3:]), f.read_bytes()) for f in (folder / split).rglob("*.jpg")}

    for split, per_class in (("train", 4), ("val", 4)):
        before, after = contents(clean, split), contents(noisy, split)
        assert {name: data for name, (_, data) in before.items()} == {name: data for name, (_, data) in after.items()}
        moved = [name for name in before if before[name][0] != after[name][0]]
        assert len(moved) == 3 * round(0.25 * per_class)  # one image of each class
    means = [np.mean([np.asarray(Image.open(f), dtype=np.float32) for f in (clean / "train" / f"class_{c:03d}")
                      .glob("*.jpg")], axis=0) for c in range(3)]
    right = [int(np.argmin([np.abs(np.asarray(Image.open(f), dtype=np.float32) - m).mean() for m in means]))
             == int(f.parent.name[-3:]) for f in (noisy / "val").rglob("*.jpg")]
    assert sum(right) / len(right) == noisy_spec.top1_ceiling


@pytest.mark.parametrize("bad", [dict(num_classes=1), dict(image_size=4), dict(quality=100), dict(noise=-1.0),
                                 dict(label_noise=-0.1), dict(num_classes=2, label_noise=0.5)])
def test_bad_spec_is_refused(bad):
    with pytest.raises(DatasetError):
        ImageSetSpec(**bad)


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="unknown data format"):
        ensure_image_set(tmp_path, TINY, formats=("parquet",))


def test_recordio_with_index_reads_back(tiny):
    mx = pytest.importorskip("mxnet")
    datasets.pack_recordio(tiny)
    rec, idx = datasets.recordio_paths(tiny, "train")
    reader = mx.recordio.MXIndexedRecordIO(str(idx), str(rec), "r")
    assert len(reader.keys) == 12
    header, payload = mx.recordio.unpack(reader.read_idx(reader.keys[0]))
    assert payload[:2] == b"\xff\xd8" and 0 <= header.label < 3  # a JPEG and its class


def test_tfrecord_reads_back(tiny):
    tf = pytest.importorskip("tensorflow")
    datasets.pack_tfrecord(tiny)
    records = list(tf.data.TFRecordDataset(str(datasets.tfrecord_path(tiny, "val"))))
    assert len(records) == 6
    example = tf.train.Example.FromString(records[0].numpy())
    assert example.features.feature[datasets.TF_IMAGE_KEY].bytes_list.value[0][:2] == b"\xff\xd8"


def test_check_data_names_the_problem(tiny):
    def scenario(**kw):
        base = dict(framework="torch", model="resnet18", num_classes=3, data="jpeg", data_dir=str(tiny))
        return Scenario(**{**base, **kw})

    assert check_data(scenario()) == TINY
    with pytest.raises(ScenarioError, match="reads data='jpeg'"):
        check_data(scenario(data="recordio"))
    with pytest.raises(ScenarioError, match="set num_classes=3"):
        check_data(scenario(num_classes=10))
    with pytest.raises(ScenarioError, match="ensure_image_set"):
        check_data(scenario(data_dir=str(tiny.parent / "nothing")))
    with pytest.raises(ScenarioError, match="formats=\\('tfrecord',\\)"):
        check_data(scenario(framework="tensorflow", data="tfrecord", data_dir=str(make_image_folders(
            ImageSetSpec(**{**TINY.__dict__, "seed": 7}), tiny.parent))))


def test_torch_loader_batches(tiny):
    pytest.importorskip("torchvision")
    from pytest_dlperf.child.loaders import torch_loader

    s = Scenario(framework="torch", model="resnet18", num_classes=3, image_size=8, batch_size=4,
                 data="jpeg", data_dir=str(tiny))
    x, y = next(torch_loader.endless(s))
    assert tuple(x.shape) == (4, 3, 8, 8) and tuple(y.shape) == (4,)
    assert sum(len(b[1]) for b in torch_loader.eval_batches(s)) == 6
    with pytest.raises(ScenarioError, match="lower batch_size"):
        torch_loader.data_loader(s.replace(batch_size=64))


def test_top_k_accuracy():
    logits = np.array([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05], [0.2, 0.3, 0.5]])
    labels = np.array([1, 1, 0])
    assert top_k_correct(logits, labels, 1) == 1
    assert top_k_correct(logits, labels, 2) == 2
    metrics = accuracy_metrics([(logits, labels)], num_classes=3)
    assert set(metrics) == {"accuracy_top1"}  # no top-5 below 10 classes
    assert metrics["accuracy_top1"].value == pytest.approx(1 / 3)
    assert metrics["accuracy_top1"].direction == "higher" and metrics["accuracy_top1"].unit == "fraction"
    ten = accuracy_metrics([(np.eye(10), np.arange(10))], num_classes=10)
    assert ten["accuracy_top1"].value == 1.0 and ten["accuracy_top5"].value == 1.0


def test_data_bound_detector_names_all_three_figures():
    fed = balance_of(compute_only=100.0, loader_only=400.0, effective=95.0)
    assert not fed.data_bound and fed.explain().startswith("compute-bound")
    starved = balance_of(compute_only=100.0, loader_only=60.0, effective=55.0)
    assert starved.data_bound
    text = starved.explain()
    assert "compute-only 100.0" in text and "loader-only 60.0" in text and "effective 55.0" in text
    assert "add loader workers" in text
    serial = balance_of(compute_only=100.0, loader_only=300.0, effective=70.0)
    assert serial.data_bound and "not overlapped" in serial.explain()
    with pytest.raises(ValueError):
        balance_of(0.0, 1.0, 1.0)
