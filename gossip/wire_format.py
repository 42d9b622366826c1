"""How a push-sum core encodes what it sends: the encoding chosen per message.

Absolute values (one-way pushes, a first request to a peer) go in
``encoding``, deltas (requests against a pair's reference, replies) in
``delta_encoding`` (:mod:`gossip.compression`).  Values an encoding cannot
hold go wider; pushes carrying mask noise go at least in float32; and a
request whose rounding would exceed ``REQUEST_ERROR_SHARE`` times the latest
measured disagreement between partners is re-encoded wider, since rounding
beyond it re-injects disagreement at every exchange (docs/design/gossip.md).
Both ends always use exactly the decoded vector, so the sums stay exact.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from gossip.compression import EncodedVector, decode, encode
from gossip.errors import InvalidValues

log = logging.getLogger("gossip.pushsum")  # the core's logger (see gossip.in_flight)

# Masked and noisy pushes carry mask-sized values: coarse encodings would add
# rounding of order mask_std / 254 (int8) to the held-apart deviation at every
# push.  It stays conserved but must mix out before the noise can be folded in,
# so such pushes travel with at least float32 precision.
NOISE_ENCODING = {"f64": "f64", "f32": "f32", "f16": "f32", "bf16": "f32", "int8": "f32"}
# When values exceed what an encoding can hold (f16 beyond 65504), fall back.
_WIDER = {"f16": "f32", "bf16": "f32", "int8": "f32", "f32": "f64"}
# A push-pull request whose rounding would be too coarse (see request) goes wider.
_WIDER_REQUEST = {"int8": "f16", "bf16": "f32", "f16": "f32"}
# A clipped reply whose rounding would stay too large in our estimate goes wider.
_WIDER_REPLY = {"int8": "f16", "bf16": "f32", "f16": "f32", "f32": "f64"}
#: A clipped reply's rounding (which stays in the responder's estimate) is at most
#: this share of the clip radius, in norm.
REPLY_RESIDUAL = 0.05
#: A push-pull request's rounding error (RMS) stays below this share of the
#: latest measured disagreement between exchange partners (RMS(q_B - q_A)).
REQUEST_ERROR_SHARE = 0.25


def rms(v: np.ndarray) -> float:
    """The root mean square of ``v`` (0 for an empty vector)."""
    # einsum's own loop, single-threaded: np.dot hands a large vector to
    # OpenBLAS threads, which are 10x slower when processes share the cores.
    return math.sqrt(float(np.einsum("i,i->", v, v)) / v.size) if v.size else 0.0


def encode_fitting(values: np.ndarray, encoding: str) -> EncodedVector:
    """``encode(values, encoding)``, widening the format if the values do not fit it."""
    while True:
        try:
            return encode(values, encoding)
        except InvalidValues:
            wider = _WIDER.get(encoding)
            if wider is None:
                raise
            log.debug("values do not fit %s; sending them as %s", encoding, wider)
            encoding = wider


def decoded(v: EncodedVector) -> np.ndarray:
    """The decoded float64 values of ``v`` (f64: a read-only view, no copy)."""
    if v.encoding == "f64":
        return np.asarray(v.data, dtype=np.float64)
    return decode(v, v.length)


class WireFormat:
    """The encodings of one core and the disagreement that widens its requests."""

    def __init__(self, encoding: str, delta_encoding: str, counters: dict[str, int]) -> None:
        self.encoding = encoding
        self.delta_encoding = delta_encoding
        #: RMS(q_B - q_A) of the latest exchange (None before any)
        self.disagreement: float | None = None
        self._c = counters  # the core's: requests_widened

    def one_way(self, payload: np.ndarray, noisy: bool) -> EncodedVector:
        """A one-way push's values (at least float32 when they carry mask noise)."""
        return encode_fitting(payload, NOISE_ENCODING[self.encoding] if noisy else self.encoding)

    def request(self, values: np.ndarray, scratch: np.ndarray, ref: np.ndarray | None = None
                ) -> tuple[EncodedVector, np.ndarray]:
        """Encode a push-pull request, in ``delta_encoding`` against ``ref`` if given,
        else in ``encoding``, or wider if too coarse; and its decoded float64 values.

        With a reference what is encoded is the delta ``values - ref``.  The
        rounding error (RMS) is kept below ``REQUEST_ERROR_SHARE`` times the
        latest disagreement measured in an exchange, else the next wider
        encoding is used (int8 -> f16 -> f32; counted in ``requests_widened``).
        Before any measurement the encoding is used as it is.  ``scratch`` is
        a float64 vector of the values' length (the core's buffer).
        """
        encoding = self.encoding if ref is None else self.delta_encoding
        n = values.shape[0]
        while True:
            v = values if ref is None else np.subtract(values, ref, out=scratch)
            encoded = encode_fitting(v, encoding)
            d = decode(encoded, n)
            wider = _WIDER_REQUEST.get(encoded.encoding)
            if wider is None or self.disagreement is None:
                return encoded, d
            # the rounding error, in the scratch buffer (v is recomputed for a retry)
            error = np.subtract(v, d, out=scratch)
            if rms(error) <= REQUEST_ERROR_SHARE * self.disagreement:
                return encoded, d
            self._c["requests_widened"] += 1
            encoding = wider

    def reply(self, delta: np.ndarray, clip: float, residual: float = 0.0
              ) -> tuple[EncodedVector, np.ndarray]:
        """Encode a reply's delta ``x - q_A`` scaled by ``clip`` (1.0: not clipped), and
        its decoded values; records the disagreement.

        A clipped reply goes in ``delta_encoding`` too, widened (up to f64) only
        while its rounding, which stays in our estimate, exceeds ``residual``
        in norm: the part handed back may be as large as the poison it came
        from.  Encoded exactly (f64), a clipped reply told its reader our
        estimate and radius exactly (docs/design/trust.md).
        """
        n = delta.shape[0]
        if clip == 1.0:
            encoded = encode_fitting(delta, self.delta_encoding)
            d = decode(encoded, n)
            self.disagreement = rms(d)
            return encoded, d
        v = delta * clip
        encoding = self.delta_encoding
        while True:
            encoded = encode_fitting(v, encoding)
            d = decode(encoded, n)
            wider = _WIDER_REPLY.get(encoded.encoding)
            if wider is None or math.sqrt(float(np.einsum("i,i->", v - d, v - d))) <= residual:
                break
            encoding = wider
        self.disagreement = rms(delta)
        return encoded, d
