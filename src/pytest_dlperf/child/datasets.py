"""Image data sets the suite makes on disk: JPEG class folders, MXNet RecordIO, TFRecord.

Nothing is downloaded. A data set is reproducible from its :class:`ImageSetSpec`
(the seed included) and learnable: every class has a fixed colour pattern (the
templates of :mod:`pytest_dlperf.child.synthetic`), every image is its class pattern plus
per-pixel noise, encoded as JPEG with Pillow. Layout, as ImageNet tools expect it::

    <root>/<spec.name>/spec.json               written last: the folder is complete
    <root>/<spec.name>/{train,val}/class_NNN/NNNNNN.jpg   torchvision ImageFolder
    <root>/<spec.name>/{train,val}.rec + .idx  MXNet RecordIO with its index (im2rec, rec2idx)
    <root>/<spec.name>/{train,val}.tfrecord    tf.train.Example: image/encoded, image/class/label

Making a folder or a packed file happens in a temporary name that is renamed into
place, so a crash never leaves a half-written data set that looks complete, and two
processes racing to make the same data set both end up using one good copy.
MXNet and TensorFlow are imported only by the function that packs their format.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from pytest_dlperf.child.synthetic import class_templates

SPLITS = ("train", "val")
FORMATS = ("jpeg", "recordio", "tfrecord")
SPEC_FILE = "spec.json"
#: tf.train.Example feature keys, as the ImageNet TFRecords of tf_cnn_benchmarks / TF-slim name them.
TF_IMAGE_KEY = "image/encoded"
TF_LABEL_KEY = "image/class/label"
#: Pixel value = MID + SCALE * (template + noise): keeps most of the range inside 0..255.
MID, SCALE = 127.5, 48.0


class DatasetError(ValueError):
    """A data set spec or folder is unusable; the message says what to do."""


@dataclass(frozen=True)
class ImageSetSpec:
    """Everything that determines the pixels and labels of a data set."""

    num_classes: int = 10
    train_per_class: int = 160
    val_per_class: int = 40
    image_size: int = 64
    seed: int = 0
    #: Standard deviation of the per-pixel noise, in units of the template's (which is 1).
    noise: float = 0.8
    quality: int = 90
    #: The fraction of each class's images, in each split, filed under another class: a model that
    #: tells every pattern apart reaches top-1 ``1 - label_noise`` on val, and no model can do better.
    label_noise: float = 0.0

    def __post_init__(self) -> None:
        for name, low in (("num_classes", 2), ("train_per_class", 1), ("val_per_class", 1), ("image_size", 8)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise DatasetError(f"{name}={value!r} must be an integer >= {low}")
        if not 1 <= self.quality <= 95:
            raise DatasetError(f"quality={self.quality!r} must be a JPEG quality between 1 and 95")
        if not self.noise >= 0:
            raise DatasetError(f"noise={self.noise!r} must be >= 0")
        if not 0 <= self.label_noise < 1 - 1 / self.num_classes:
            raise DatasetError(f"label_noise={self.label_noise!r} must be >= 0 and below 1 - 1/num_classes "
                               f"({1 - 1 / self.num_classes:.2f}), where the true class is no longer the most common")

    @property
    def top1_ceiling(self) -> float:
        """The val top-1 of a model that classifies every pattern right: the relabelled images count wrong."""
        return 1 - round(self.label_noise * self.val_per_class) / self.val_per_class

    @property
    def name(self) -> str:
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:8]
        return (f"images-{self.num_classes}c-{self.image_size}px-{self.train_per_class}+{self.val_per_class}"
                f"-seed{self.seed}-{digest}")

    def count(self, split: str) -> int:
        per_class = self.train_per_class if split == "train" else self.val_per_class
        return per_class * self.num_classes


def class_name(index: int) -> str:
    return f"class_{index:03d}"


def _encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _images(spec: ImageSetSpec, split: str) -> Iterator[tuple[int, int, bytes]]:
    """(label, index unique within the split, JPEG bytes) for one split, reproducibly: the first
    ``label_noise`` of each class's images are labelled with another class, drawn from the seed."""
    templates = class_templates(spec.num_classes, spec.image_size, spec.seed)  # (C, 3, H, W)
    per_class = spec.train_per_class if split == "train" else spec.val_per_class
    relabelled = round(spec.label_noise * per_class)
    rng = np.random.default_rng([spec.seed, SPLITS.index(split)])
    # its own stream, so the pixels of a data set do not depend on its label noise
    relabel = np.random.default_rng([spec.seed, SPLITS.index(split), 1])
    for pattern_class in range(spec.num_classes):
        pattern = templates[pattern_class].transpose(1, 2, 0)  # HWC
        for i in range(per_class):
            noisy = pattern + spec.noise * rng.standard_normal(pattern.shape, dtype=np.float32)
            pixels = np.clip(MID + SCALE * noisy, 0, 255).astype(np.uint8)
            label = pattern_class
            if i < relabelled:
                label = (pattern_class + int(relabel.integers(1, spec.num_classes))) % spec.num_classes
            yield label, pattern_class * per_class + i, _encode_jpeg(pixels, spec.quality)


def _read_spec(folder: Path) -> ImageSetSpec | None:
    try:
        return ImageSetSpec(**json.loads((folder / SPEC_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def make_image_folders(spec: ImageSetSpec, root: str | os.PathLike[str]) -> Path:
    """``root/<spec.name>`` with JPEG class folders for train and val; reused when already complete."""
    root = Path(root)
    final = root / spec.name
    if _read_spec(final) == spec:
        return final
    if final.exists():
        raise DatasetError(f"{final} exists but is not a complete data set for {spec}; delete it and rerun")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=root))
    staging.chmod(0o755)
    try:
        for split in SPLITS:
            for label, i, data in _images(spec, split):
                folder = staging / split / class_name(label)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{i:06d}.jpg").write_bytes(data)
        (staging / SPEC_FILE).write_text(json.dumps(asdict(spec), sort_keys=True), encoding="utf-8")
        try:
            os.rename(staging, final)
        except OSError:  # another process finished first
            if _read_spec(final) != spec:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def read_spec(dataset_dir: str | os.PathLike[str]) -> ImageSetSpec:
    """The spec of a complete data set folder, or a DatasetError saying how to make one."""
    spec = _read_spec(Path(dataset_dir))
    if spec is None:
        raise DatasetError(
            f"{dataset_dir} is not a data set made by pytest_dlperf.child.datasets (no valid {SPEC_FILE}); "
            "make one with pytest_dlperf.child.datasets.ensure_image_set(root, ImageSetSpec(...), formats)"
        )
    return spec


def _listing(dataset_dir: Path, split: str) -> list[tuple[int, Path]]:
    """(label, file) in ImageFolder order: classes sorted by folder name, files sorted."""
    classes = sorted(p for p in (dataset_dir / split).iterdir() if p.is_dir())
    return [(label, f) for label, folder in enumerate(classes) for f in sorted(folder.glob("*.jpg"))]


def _shuffled(items: Sequence[tuple[int, Path]], seed: int) -> list[tuple[int, Path]]:
    """im2rec shuffles its list by default; so do we, reproducibly."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order]


def recordio_paths(dataset_dir: str | os.PathLike[str], split: str) -> tuple[Path, Path]:
    folder = Path(dataset_dir)
    return folder / f"{split}.rec", folder / f"{split}.idx"


def tfrecord_path(dataset_dir: str | os.PathLike[str], split: str) -> Path:
    return Path(dataset_dir) / f"{split}.tfrecord"


def pack_recordio(dataset_dir: str | os.PathLike[str]) -> list[Path]:
    """Pack each split into ``<split>.rec`` + ``<split>.idx`` (needs MXNet).

    ``MXIndexedRecordIO`` writes the record file and its ``key\\toffset`` index in one
    pass, which is what ``im2rec`` does, and what ``rec2idx`` recovers from a bare
    ``.rec``. The JPEG bytes go in unchanged (im2rec ``--pass-through``), with the
    label in the IRHeader, as ``ImageRecordIter`` reads them.
    """
    import mxnet as mx  # noqa: PLC0415  (only the MXNet environment has it)

    folder = Path(dataset_dir)
    spec = read_spec(folder)
    written = []
    for split in SPLITS:
        rec, idx = recordio_paths(folder, split)
        if rec.exists() and idx.exists():
            continue
        tmp_rec, tmp_idx = rec.with_suffix(f".rec.tmp{os.getpid()}"), idx.with_suffix(f".idx.tmp{os.getpid()}")
        writer = mx.recordio.MXIndexedRecordIO(str(tmp_idx), str(tmp_rec), "w")
        try:
            for key, (label, path) in enumerate(_shuffled(_listing(folder, split), spec.seed)):
                header = mx.recordio.IRHeader(flag=0, label=float(label), id=key, id2=0)
                writer.write_idx(key, mx.recordio.pack(header, path.read_bytes()))
        finally:
            writer.close()
        os.replace(tmp_rec, rec)
        os.replace(tmp_idx, idx)
        written += [rec, idx]
    return written


def pack_tfrecord(dataset_dir: str | os.PathLike[str]) -> list[Path]:
    """Write each split as ``<split>.tfrecord`` of ``tf.train.Example`` (needs TensorFlow)."""
    import tensorflow as tf  # noqa: PLC0415  (only the TensorFlow environment has it)

    folder = Path(dataset_dir)
    spec = read_spec(folder)
    written = []
    for split in SPLITS:
        target = tfrecord_path(folder, split)
        if target.exists():
            continue
        tmp = target.with_suffix(f".tfrecord.tmp{os.getpid()}")
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for label, path in _shuffled(_listing(folder, split), spec.seed):
                example = tf.train.Example(features=tf.train.Features(feature={
                    TF_IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[path.read_bytes()])),
                    TF_LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }))
                writer.write(example.SerializeToString())
        os.replace(tmp, target)
        written.append(target)
    return written


def ensure_image_set(
    root: str | os.PathLike[str],
    spec: ImageSetSpec | None = None,
    formats: Sequence[str] = ("jpeg",),
) -> Path:
    """The data set folder for ``spec`` under ``root``, with every format in ``formats`` present."""
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise DatasetError(f"unknown data format(s) {unknown}; use {', '.join(FORMATS)}")
    folder = make_image_folders(spec or ImageSetSpec(), root)
    if "recordio" in formats:
        pack_recordio(folder)
    if "tfrecord" in formats:
        pack_tfrecord(folder)
    return folder


#: The format each framework's loader reads, and so the one its data set needs packed.
FRAMEWORK_FORMATS = {"torch": "jpeg", "tensorflow": "tfrecord", "mxnet": "recordio"}
