"""Why a TensorFlow or MXNet child's peak resident memory read 10-21% higher right after an install.

Trains Gluon ResNet-18 (batch 16, 64 px, 10 steps) in this process and prints two figures: the peak
resident set (``ru_maxrss``, what ``peak_host_memory`` was) and the peak less the file-backed pages
(what it is now, :func:`pytest_dlperf.child.measure.peak_host_memory_bytes`). Run it in a fresh MXNet
environment, then after ``sync; echo 3 > /proc/sys/vm/drop_caches`` (root), then after
``pip install --force-reinstall --no-deps mxnet==1.9.1``: only the first figure moves
(docs/verdicts.md, "Peak host memory").
"""

import resource
import sys
from pathlib import Path

import mxnet as mx
from mxnet.gluon.model_zoo import vision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_dlperf.child.measure import peak_host_memory_bytes  # noqa: E402

net = vision.resnet18_v1(classes=10)
net.initialize(mx.init.Xavier())
trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
x = mx.nd.random.uniform(shape=(16, 3, 64, 64))
y = mx.nd.array([i % 10 for i in range(16)])
for _ in range(10):
    with mx.autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(16)
    loss.asnumpy()
print(f"peak resident set {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB, "
      f"peak less file-backed pages {peak_host_memory_bytes() // 2**20} MiB")
