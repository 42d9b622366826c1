"""Declarations of networks and partial models in the papers' notation.

A network is written ``64=48=32=10`` (layer sizes) and a partial model
``64-40-24-10`` (neurons of each layer it holds): plain validated value
objects that :mod:`learner.layout` turns into neuron assignments and ownership.
A convolutional network starts with its image shape:
``1x28x28=c16k5=pool2=c32k5=pool2=100=10`` (``c16k5``: 16 channels, 5x5 kernel,
no padding, stride 1; ``p2`` pads, ``s2`` strides; ``pool2``: 2x2 max pooling
after the convolution's activation). Channels play the role of neurons, so its
sizes are ``(1, 16, 32, 100, 10)``. Batch normalization is refused: its running
statistics neither belong to a weight block nor average like one.

See docs/guide/configuration.md and docs/design/partial-models.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from learner.errors import FieldError

__all__ = [
    "ACTIVATIONS",
    "ConvSpec",
    "DECLARED_KINDS",
    "LOCAL_MODEL",
    "NetworkSpec",
    "PartialModelSpec",
    "SpecError",
    "parse_counts",
    "parse_sizes",
    "validate_model_name",
]

#: Activation functions a network may declare.
ACTIVATIONS: tuple[str, ...] = ("relu", "sigmoid", "tanh")

#: Name of the implicit local model of every node (reserved).
LOCAL_MODEL = "local"

#: Values accepted for an explicit ``kind`` on a declared (shared) model.
DECLARED_KINDS: tuple[str, ...] = ("global", "semi-local")

_NETWORK_FORM = 'layer sizes joined by "=", e.g. "64=48=32=10" (at least 2 layers, each >= 1)'
_COUNTS_FORM = 'neuron counts joined by "-", one per layer, e.g. "64-40-24-10" or "0-8-4-0"'
_NAME_FORM = "a letter or '_' followed by letters, digits, '_', '.' or '-' (at most 64 chars)"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_CNN_FORM = ('an image shape CxHxW then parts joined by "=", e.g. '
             '"1x28x28=c16k5=pool2=c32k5=pool2=100=10" (c16k5: 16 channels, 5x5 kernel, no '
             'padding; c16k5p2: padding 2; c16k3s2: stride 2; pool2: 2x2 max pooling after the '
             'convolution before it; plain numbers: dense layers, the last one the output)')
_IMAGE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)$")
_CONV_RE = re.compile(r"^c(\d+)k(\d+)(?:p(\d+))?(?:s(\d+))?$")
_POOL_RE = re.compile(r"^pool(\d+)$")
_BATCH_NORM_RE = re.compile(r"^(bn|batch_?norm)(2d)?$", re.IGNORECASE)


class SpecError(FieldError):
    """A network or partial-model declaration is malformed or inconsistent.

    The message names the offending network/model/key and the expected form.
    ``field`` is the attribute at fault (``"sizes"``, ``"activation"``,
    ``"name"``, ``"counts"``, ``"depends_on"``, ``"kind"``; None when the
    models do not fit together), ``model`` the partial model's name and
    ``index`` its position in the list given to :class:`~learner.model_graph.ModelGraph`
    or :class:`~learner.layout.ModelLayout`, when known.
    """

    def __init__(self, detail: str, *, field: str | None = None, model: str | None = None,
                 index: int | None = None) -> None:
        super().__init__(detail, field=field)
        self.model = model
        self.index = index


def _parse_int_list(text: str, sep: str, *, what: str, form: str, field: str,
                    model: str | None = None) -> tuple[int, ...]:
    if not isinstance(text, str):
        raise SpecError(f"{what}: expected a string of {form}, got {type(text).__name__}",
                        field=field, model=model)
    parts = text.strip().split(sep)
    values: list[int] = []
    for part in parts:
        part = part.strip()
        if not part.isdigit():
            raise SpecError(f"{what}: cannot parse {text!r}: {part!r} is not a whole number; "
                            f"expected {form}", field=field, model=model)
        values.append(int(part))
    return tuple(values)


def _as_int_tuple(values: Iterable[object], *, what: str, form: str, field: str,
                  model: str | None = None) -> tuple[int, ...]:
    out: list[int] = []
    for v in values:
        # bool is an int subclass but never a sensible layer size
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{what}: {v!r} is not an integer; expected {form}", field=field,
                            model=model)
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class ConvSpec:
    """One convolution part: a square ``kernel``, zero ``padding`` on every side,
    ``stride``, then (after the activation) a ``pool`` x ``pool`` max pooling with
    stride ``pool`` (1: no pooling). Its channel count lives in
    :attr:`NetworkSpec.sizes` like a dense layer's neuron count."""

    kernel: int
    padding: int = 0
    stride: int = 1
    pool: int = 1

    def __post_init__(self) -> None:
        for field, low in (("kernel", 1), ("padding", 0), ("stride", 1), ("pool", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SpecError(f"convolution {field} {value!r} is invalid; expected an integer "
                                f">= {low}", field="sizes")

    def output_shape(self, height: int, width: int) -> tuple[int, int]:
        """Spatial shape of this part's output for a ``height`` x ``width`` input
        (after the pooling; may be 0 or negative when the input is too small)."""
        h = (height + 2 * self.padding - self.kernel) // self.stride + 1
        w = (width + 2 * self.padding - self.kernel) // self.stride + 1
        return h // self.pool, w // self.pool

    def notation(self, channels: int) -> str:
        """``c16k5``, ``c16k5p2``, ``c16k3s2``, followed by ``=pool2`` when pooling."""
        text = f"c{channels}k{self.kernel}"
        if self.padding:
            text += f"p{self.padding}"
        if self.stride != 1:
            text += f"s{self.stride}"
        if self.pool != 1:
            text += f"=pool{self.pool}"
        return text


def _too_small(network: str, what: str, height: int, width: int, window: int) -> SpecError:
    return SpecError(f"network {network!r}: {what} gets a {height}x{width} feature map, smaller "
                     f"than its {window}x{window} window; use a larger image, padding or a "
                     "smaller kernel", field="sizes")


def _parse_image_network(text: str, tokens: list[str]
                         ) -> tuple[tuple[int, ...], tuple[int, int], tuple[ConvSpec, ...]]:
    """Read ``CxHxW=c16k5=pool2=...=100=10`` into (sizes, (H, W), convolutions)."""
    image = _IMAGE_RE.match(tokens[0])
    assert image is not None
    channels, height, width = (int(g) for g in image.groups())
    if height < 1 or width < 1:
        raise SpecError(f"network {text!r}: image {tokens[0]!r} has an empty side; expected "
                        f"{_CNN_FORM}", field="sizes")
    sizes = [channels]
    convs: list[ConvSpec] = []
    dense = False
    previous = tokens[0]
    for position, token in enumerate(tokens[1:], 1):
        where = f"network {text!r}: part {position} {token!r}"
        if _BATCH_NORM_RE.match(token):
            raise SpecError(f"{where} is a batch normalization, which partial models refuse: "
                            "its running mean and variance are per-channel state that SGD "
                            "does not train and push-sum does not average like weights; remove "
                            "it", field="sizes")
        conv = _CONV_RE.match(token)
        pool = _POOL_RE.match(token)
        if conv is not None:
            if dense:
                raise SpecError(f"{where}: a convolution cannot follow a dense layer (the "
                                "feature maps are flattened by the first dense layer); put "
                                f"every convolution before the dense layers: {_CNN_FORM}",
                                field="sizes")
            out, kernel, padding, stride = conv.groups()
            try:
                convs.append(ConvSpec(int(kernel), int(padding or 0), int(stride or 1)))
            except SpecError as exc:
                raise SpecError(f"{where}: {exc.detail}", field="sizes") from None
            sizes.append(int(out))
        elif pool is not None:
            if not _CONV_RE.match(previous):
                raise SpecError(f"{where}: a pooling must directly follow a convolution (it "
                                f"follows {previous!r}); expected {_CNN_FORM}", field="sizes")
            window = int(pool.group(1))
            if window < 2:
                raise SpecError(f"{where}: pooling window {window} does nothing; expected "
                                "pool2 or larger", field="sizes")
            convs[-1] = dataclasses.replace(convs[-1], pool=window)
        elif token.isdigit():
            dense = True
            sizes.append(int(token))
        else:
            raise SpecError(f"{where} is not a layer; expected a convolution such as c16k5 "
                            "(16 channels, 5x5 kernel, no padding), c16k5p2 (padding 2) or "
                            "c16k3s2 (stride 2), a max pooling such as pool2 right after a "
                            f"convolution, or a dense layer size; {_CNN_FORM}", field="sizes")
        previous = token
    if not dense:
        raise SpecError(f"network {text!r}: the last part must be a dense output layer (its "
                        f"size is the number of classes); expected {_CNN_FORM}", field="sizes")
    return tuple(sizes), (height, width), tuple(convs)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Read the dense layer notation ``"64=48=32=10"`` (checked as :class:`NetworkSpec` does).

    A convolutional network is refused here (its sizes alone would silently make
    an MLP); read it with :meth:`NetworkSpec.parse`.
    """
    net = NetworkSpec.parse(text)
    if net.image_size is not None:
        raise SpecError(f"network {text!r} is convolutional; this reader takes dense layer "
                        f"sizes only ({_NETWORK_FORM}); read it with NetworkSpec.parse",
                        field="sizes")
    return net.sizes


def parse_counts(text: str, *, model: str | None = None) -> tuple[int, ...]:
    """Read a partial model's neuron counts ``"64-40-24-10"`` (form only; the counts
    are checked by :class:`PartialModelSpec`)."""
    what = "partial model" if model is None else f"partial model {model!r}"
    return _parse_int_list(text, "-", what=what, form=_COUNTS_FORM, field="counts", model=model)


def validate_model_name(name: object, *, what: str = "partial model") -> str:
    """Return ``name`` if it is a valid model name, else raise :class:`SpecError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(f"{what} name {name!r} is invalid: not a valid model name; expected "
                        f"{_NAME_FORM}", field="name")
    if name == LOCAL_MODEL:
        raise SpecError(f"{what} name {name!r} is reserved for the implicit local model (the "
                        "neurons no declared model covers); choose another name", field="name")
    return name


@dataclass(frozen=True)
class NetworkSpec:
    """A network: part sizes from input to output, its activation and, for a
    convolutional network, the image shape and the convolutions.

    ``sizes`` counts neurons per part: input features, hidden neurons, output
    classes for a multi-layer perceptron; for a network on images the input's
    channels, each convolution's output channels, then dense neurons.
    ``image_size`` is the input's (height, width) (None: flat input) and
    ``convs`` describe parts ``1..len(convs)``; the remaining parts are dense.
    The activation follows every convolution and hidden dense layer; the
    output layer gives logits.
    """

    sizes: tuple[int, ...]
    activation: str = "relu"
    image_size: tuple[int, int] | None = None
    convs: tuple[ConvSpec, ...] = ()

    def __post_init__(self) -> None:
        form = _NETWORK_FORM if self.image_size is None else _CNN_FORM
        sizes = _as_int_tuple(self.sizes, what="network", form=form, field="sizes")
        if len(sizes) < 2:
            raise SpecError(f"network: {len(sizes)} layer(s) given; expected {form}",
                            field="sizes")
        for i, s in enumerate(sizes):
            if s < 1:
                raise SpecError(f"network: layer {i} has size {s}; expected {form}",
                                field="sizes")
        if self.activation not in ACTIVATIONS:
            raise SpecError(f"network activation {self.activation!r} is unknown; expected one "
                            f"of {', '.join(ACTIVATIONS)}", field="activation")
        object.__setattr__(self, "sizes", sizes)
        self._check_image(sizes)

    def _check_image(self, sizes: tuple[int, ...]) -> None:
        if isinstance(self.convs, ConvSpec):
            raise SpecError("network: convs must be a sequence of ConvSpec, not one ConvSpec",
                            field="sizes")
        convs = tuple(self.convs)
        for conv in convs:
            if not isinstance(conv, ConvSpec):
                raise SpecError(f"network: convolution {conv!r} is not a ConvSpec",
                                field="sizes")
        object.__setattr__(self, "convs", convs)
        if self.image_size is None:
            if convs:
                raise SpecError(f"network: convolutions need an image input; give image_size "
                                f"(height, width), i.e. {_CNN_FORM}", field="sizes")
            return
        image = _as_int_tuple(self.image_size, what="network image size",
                              form="(height, width)", field="sizes")
        if len(image) != 2 or min(image) < 1:
            raise SpecError(f"network: image size {image} is invalid; expected (height, width) "
                            "with both >= 1", field="sizes")
        object.__setattr__(self, "image_size", image)
        if len(convs) > len(sizes) - 2:
            raise SpecError(f"network: {len(convs)} convolution(s) for {len(sizes)} parts; "
                            "the input and the output layer are not convolutions, so at most "
                            f"{len(sizes) - 2} fit", field="sizes")
        height, width = image
        for layer, conv in enumerate(convs, 1):
            name = f"layer {layer} ({conv.notation(sizes[layer]).split('=')[0]})"
            padded = (height + 2 * conv.padding, width + 2 * conv.padding)
            if min(padded) < conv.kernel:
                raise _too_small(self.notation(), name, *padded, conv.kernel)
            plain = ConvSpec(conv.kernel, conv.padding, conv.stride)
            h, w = plain.output_shape(height, width)
            if min(h, w) < conv.pool:
                raise _too_small(self.notation(), f"the pool{conv.pool} after {name}", h, w,
                                 conv.pool)
            height, width = conv.output_shape(height, width)

    @classmethod
    def parse(cls, text: str, activation: str = "relu") -> NetworkSpec:
        """Parse ``"64=48=32=10"`` or ``"1x28x28=c16k5=pool2=c32k5=pool2=100=10"``."""
        if isinstance(text, str):
            tokens = [t.strip() for t in text.strip().split("=")]
            if _IMAGE_RE.match(tokens[0]):
                sizes, image, convs = _parse_image_network(text, tokens)
                return cls(sizes, activation, image, convs)
            for token in tokens:
                if _CONV_RE.match(token) or _POOL_RE.match(token) or _BATCH_NORM_RE.match(token):
                    raise SpecError(f"network {text!r}: part {token!r} needs an image input; "
                                    "start with the image shape CxHxW (e.g. 1x28x28), i.e. "
                                    f"{_CNN_FORM}", field="sizes")
        return cls(_parse_int_list(text, "=", what="network", form=_NETWORK_FORM,
                                   field="sizes"), activation)

    @property
    def num_layers(self) -> int:
        """Number of parts (layers) including input and output."""
        return len(self.sizes)

    @property
    def is_convolutional(self) -> bool:
        """True for a network on images (``CxHxW`` input)."""
        return self.image_size is not None

    @property
    def input_image(self) -> tuple[int, int, int] | None:
        """``(channels, height, width)`` of an image input; None for a flat one."""
        if self.image_size is None:
            return None
        return (self.sizes[0], *self.image_size)

    @property
    def input_features(self) -> int:
        """Values per input row: ``sizes[0]``, or ``C*H*W`` for an image input."""
        if self.image_size is None:
            return self.sizes[0]
        return self.sizes[0] * self.image_size[0] * self.image_size[1]

    def conv(self, layer: int) -> ConvSpec | None:
        """The convolution of part ``layer`` (1..k), or None for a dense part."""
        return self.convs[layer - 1] if 1 <= layer <= len(self.convs) else None

    def feature_maps(self) -> tuple[tuple[int, int], ...]:
        """Spatial (height, width) of the input and after each convolution (and its
        pooling); empty for a flat input."""
        if self.image_size is None:
            return ()
        shapes = [self.image_size]
        for conv in self.convs:
            shapes.append(conv.output_shape(*shapes[-1]))
        return tuple(shapes)

    def weights_per_pair(self, layer: int) -> int:
        """Weights joining one neuron (channel) of part ``layer - 1`` to one of part
        ``layer``: the kernel area for a convolution, the flattened feature-map area
        for the first dense part on an image, 1 for a dense part after a dense part."""
        conv = self.conv(layer)
        if conv is not None:
            return conv.kernel * conv.kernel
        if self.image_size is not None and layer == len(self.convs) + 1:
            height, width = self.feature_maps()[-1]
            return height * width
        return 1

    def structure(self) -> dict[str, object] | None:
        """What decides the meaning of weights beyond the part sizes, for fingerprints:
        None for a flat-input network, else the image size and every convolution."""
        if self.image_size is None:
            return None
        return {
            "image": list(self.image_size),
            "convolutions": [{"kernel": c.kernel, "padding": c.padding, "stride": c.stride,
                              "max_pool": c.pool} for c in self.convs],
        }

    def notation(self) -> str:
        """The papers' notation, e.g. ``64=48=32=10`` or ``1x28x28=c16k5=pool2=...=10``."""
        if self.image_size is None:
            return "=".join(str(s) for s in self.sizes)
        height, width = self.image_size
        parts = [f"{self.sizes[0]}x{height}x{width}"]
        parts += [conv.notation(self.sizes[i]) for i, conv in enumerate(self.convs, 1)]
        parts += [str(s) for s in self.sizes[len(self.convs) + 1:]]
        return "=".join(parts)

    def __str__(self) -> str:
        return f"{self.notation()} ({self.activation})"


@dataclass(frozen=True)
class PartialModelSpec:
    """A partial model: its name, its neurons per layer, and the models it depends on.

    ``counts`` are the model's *own* neurons (not those of its dependencies).
    ``kind`` optionally overrides the global/semi-local heuristic of
    :meth:`learner.layout.ModelLayout.model_kind`.
    """

    name: str
    counts: tuple[int, ...]
    depends_on: tuple[str, ...] = ()
    kind: str | None = None

    def __post_init__(self) -> None:
        validate_model_name(self.name)
        name = self.name
        what = f"partial model {name!r}"

        def error(detail: str, field: str) -> SpecError:
            return SpecError(f"{what}: {detail}", field=field, model=name)

        if isinstance(self.counts, str):
            raise error("counts given as a string; use PartialModelSpec.parse or a tuple of "
                        f"integers ({_COUNTS_FORM})", "counts")
        counts = _as_int_tuple(self.counts, what=what, form=_COUNTS_FORM, field="counts",
                               model=name)
        if len(counts) < 2:
            raise error(f"{len(counts)} count(s) given; expected {_COUNTS_FORM}", "counts")
        if any(c < 0 for c in counts):
            raise error(f"negative neuron count in {counts}; expected {_COUNTS_FORM}", "counts")
        if sum(counts) == 0:
            raise error(f"holds no neuron at all; expected {_COUNTS_FORM} with at least one "
                        "non-zero count", "counts")
        if isinstance(self.depends_on, str):
            raise error("depends_on must be a list of model names, not the string "
                        f"{self.depends_on!r}", "depends_on")
        deps = tuple(self.depends_on)
        for d in deps:
            if not isinstance(d, str) or not d:
                raise error(f"dependency {d!r} is not a model name; expected {_NAME_FORM}",
                            "depends_on")
            if d == LOCAL_MODEL:
                raise error(f"cannot depend on the implicit {LOCAL_MODEL!r} model", "depends_on")
        dupes = sorted({d for d in deps if deps.count(d) > 1})
        if dupes:
            raise error(f"dependency listed twice: {', '.join(dupes)}", "depends_on")
        if self.kind is not None and self.kind not in DECLARED_KINDS:
            raise error(f"kind {self.kind!r} is unknown; expected one of "
                        f"{', '.join(DECLARED_KINDS)} (or leave it unset)", "kind")
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "depends_on", deps)

    @classmethod
    def parse(
        cls,
        name: str,
        counts: str,
        depends_on: Sequence[str] = (),
        kind: str | None = None,
    ) -> PartialModelSpec:
        """Parse ``PartialModelSpec.parse("A", "0-8-4-0", depends_on=["G"])``."""
        validate_model_name(name)
        parsed = parse_counts(counts, model=name)
        if isinstance(depends_on, str):
            raise SpecError(f"partial model {name!r}: depends_on must be a list of model names, "
                            f"not the string {depends_on!r}", field="depends_on", model=name)
        return cls(name, parsed, tuple(depends_on), kind)

    def notation(self) -> str:
        """The papers' notation, e.g. ``64-40-24-10``."""
        return "-".join(str(c) for c in self.counts)

    def __str__(self) -> str:
        deps = f" <- {', '.join(self.depends_on)}" if self.depends_on else ""
        return f"{self.name} {self.notation()}{deps}"
