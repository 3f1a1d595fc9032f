"""The Keras models the TensorFlow core trains: ``keras.applications`` by name (``weights=None``),
torchvision's ResNet-18 built from Keras layers, layer for layer, since Keras has none, and two small nets
(:data:`SMALL`) for the distributed jobs and the counted lane, where Keras's smallest application took
longer to trace than ResNet-18.
"""

from __future__ import annotations

from typing import Any, Callable

import keras

from pytest_dlperf.scenario import Scenario, ScenarioError


def _torch_conv_init() -> keras.initializers.Initializer:
    """torchvision ResNet's ``kaiming_normal_(mode="fan_out", nonlinearity="relu")`` for convolutions."""
    return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")


def _torch_linear_init(fan_in: int) -> keras.initializers.Initializer:
    """``nn.Linear``'s default, ``kaiming_uniform_(a=sqrt(5))``: U(+-1/sqrt(fan_in)), weights and bias alike."""
    return keras.initializers.RandomUniform(-(fan_in**-0.5), fan_in**-0.5)


def _conv_bn(x: Any, filters: int, kernel: int, stride: int, bn_axis: int, name: str) -> Any:
    """Conv (no bias, torchvision's explicit symmetric padding) + BatchNorm."""
    pad = kernel // 2
    if pad:
        x = keras.layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
    x = keras.layers.Conv2D(filters, kernel, strides=stride, use_bias=False, kernel_initializer=_torch_conv_init(),
                            name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(axis=bn_axis, epsilon=1e-5, momentum=0.9, name=f"{name}_bn")(x)


def _basic_block(x: Any, filters: int, stride: int, bn_axis: int, name: str) -> Any:
    """torchvision ``BasicBlock``: two 3x3 convs, identity or 1x1-conv shortcut."""
    shortcut = x
    if stride != 1 or x.shape[bn_axis] != filters:
        shortcut = _conv_bn(x, filters, 1, stride, bn_axis, f"{name}_down")
    y = _conv_bn(x, filters, 3, stride, bn_axis, f"{name}_1")
    y = keras.layers.ReLU(name=f"{name}_1_relu")(y)
    y = _conv_bn(y, filters, 3, 1, bn_axis, f"{name}_2")
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def resnet18(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """ResNet-18 (He et al. 2015; torchvision ``resnet18``) in the global image data format.

    Same layers, shapes and initialisation as torchvision's: 11,689,512 trainable
    parameters at 1000 classes; convolutions He-normal over fan-out, the classifier
    U(+-1/sqrt(512)). (Keras's default Glorot init makes the activations grow through
    the net, and BatchNorm's moving statistics lag far behind them in a short run.)
    """
    bn_axis = 1 if keras.backend.image_data_format() == "channels_first" else 3
    inputs = keras.Input(shape=input_shape, name="images")
    x = _conv_bn(inputs, 64, 7, 2, bn_axis, "stem")
    x = keras.layers.ReLU(name="stem_relu")(x)
    x = keras.layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, name="stem_pool")(x)
    for stage, filters in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = _basic_block(x, filters, stride, bn_axis, f"layer{stage}_{block}")
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    linear = _torch_linear_init(512)
    outputs = keras.layers.Dense(classes, kernel_initializer=linear, bias_initializer=linear, name="logits")(x)
    return keras.Model(inputs, outputs, name="resnet18")


def tiny_cnn(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """Two convolutions, no BatchNorm: the distributed equivalence checks compare its weights exactly."""
    return keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(classes),
    ])


def convnet_bn(input_shape: tuple[int, int, int], classes: int) -> keras.Model:
    """Four conv-BN-ReLU layers and three 2x2 pools, so it sees the whole 32 px image: a small real CNN.

    BatchNorm's momentum is 0.9, as in PyTorch and Gluon: Keras's 0.99 leaves the moving statistics near
    their initial values after the few dozen steps of a CI run, so evaluation would measure that lag."""
    bn_axis = 1 if keras.backend.image_data_format() == "channels_first" else -1
    layers: list[Any] = [keras.Input(input_shape)]
    for filters, pool in ((32, True), (64, True), (64, True), (64, False)):
        layers += [keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
                   keras.layers.BatchNormalization(axis=bn_axis, momentum=0.9), keras.layers.ReLU()]
        if pool:
            layers.append(keras.layers.MaxPooling2D(2))
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes)]
    return keras.Sequential(layers)


#: The small nets by name, built from an input shape and a class count like :func:`resnet18`.
SMALL: dict[str, Callable[[tuple[int, int, int], int], keras.Model]] = {"tiny_cnn": tiny_cnn, "convnet_bn": convnet_bn}


def _application(model: str) -> Callable[..., keras.Model] | None:
    """``resnet50`` -> ``keras.applications.ResNet50``; ``mobilenet_v2`` -> ``MobileNetV2``."""
    wanted = model.replace("_", "").replace("-", "").lower()
    for name in dir(keras.applications):
        attr = getattr(keras.applications, name)
        if callable(attr) and name[0].isupper() and name.lower() == wanted:
            return attr
    return None


def build_model(scenario: Scenario) -> keras.Model:
    s = scenario
    shape = (3, s.image_size, s.image_size) if s.data_format == "NCHW" else (s.image_size, s.image_size, 3)
    if s.model == "resnet18":
        return resnet18(shape, s.num_classes)
    if s.model in SMALL:
        return SMALL[s.model](shape, s.num_classes)
    constructor = _application(s.model)
    if constructor is None:
        known = sorted(n.lower() for n in dir(keras.applications) if n[0].isupper())
        built = ", ".join(["resnet18", *SMALL])
        raise ScenarioError(f"keras.applications has no model {s.model!r}; use {built} (built here) or one of: "
                            f"{', '.join(known)}")
    try:
        return constructor(weights=None, input_shape=shape, classes=s.num_classes, classifier_activation=None)
    except ValueError as exc:  # e.g. an input size the architecture does not accept
        raise ScenarioError(f"keras.applications {constructor.__name__} at {shape}: {exc}") from None
