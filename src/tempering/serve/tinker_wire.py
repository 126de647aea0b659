"""The Tinker API's protobuf bodies: forward/backward requests in, forward/backward outputs and
samples out (the rest of the API is JSON, validated by the client's own pydantic types).

The schema is the official SDK's (`tinker.proto.tinker_public_pb2`, the `tinker` extra), so
the server reads exactly what the client writes: a datum's tokens as int32 bytes, its loss
inputs as dense or sparse-CSR tensors, its provenance spans (`Datum.with_provenance`, checked
against the recorded samples by `tinker_records.py`); outputs as one `ArrayRecord` of per-datum
slices.

Everything in a request is checked against its own declared sizes before memory is given to
it: a zstd body's frame must declare its size, within the cap, and is decompressed as a stream
that stops at that size; token counts are bounded per datum and per call; every loss input is
one value per input token (dense bytes of exactly that length, or CSR entries inside it), so
nothing is allocated at a size the client chose. A body that fails a check is a `WireError`
(the route's 400).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tempering.errors import UserError

if TYPE_CHECKING:
    from tinker.proto.tinker_public_pb2 import DType

CALL = "forward_backward"


class WireError(UserError):
    """A request body the server cannot read; the message names the call and the field."""


@dataclass(frozen=True)
class WireLimits:
    """What one forward_backward body may hold (from `TinkerServeConfig`)."""

    max_bytes: int
    """Largest body after decompression."""
    max_datum_tokens: int
    max_call_tokens: int


@dataclass(frozen=True)
class Span:
    """A provenance run: `length` positions that are positions [offset, offset + length) of the
    sampled tokens (`sampled`) or of the prompt of sequence `sequence_id`."""

    sampled: bool
    sequence_id: str
    offset: int
    length: int


@dataclass
class WireDatum:
    """One training example: its input tokens and its named loss inputs (1-D arrays), with the
    provenance runs tiling its input tokens and its targets (empty when it has none)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray]
    input_spans: list[Span] = field(default_factory=list)
    target_spans: list[Span] = field(default_factory=list)


@dataclass
class FwdBwdRequest:
    model_id: str
    loss_fn: str
    forward_only: bool
    data: list[WireDatum]
    config: dict[str, float | str] = field(default_factory=dict)


def _pb():
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


_NUMPY = {"DTYPE_FLOAT32": np.float32, "DTYPE_INT64": np.int64, "DTYPE_INT32": np.int32}


def decompress(body: bytes, encoding: str | None, cap: int) -> bytes:
    """`body` as sent (no encoding) or its one zstd frame, which must declare a size <= `cap`
    and is decompressed as a stream that never outputs more than it declared."""
    if not encoding or encoding == "identity":
        return body
    if encoding != "zstd":
        raise WireError(f"{CALL}: Content-Encoding {encoding!r} is not supported (zstd is)")
    import zstandard

    try:
        declared = zstandard.frame_content_size(body)
    except zstandard.ZstdError:
        raise WireError(f"{CALL}: the body is not a zstd frame (Content-Encoding: zstd)") from None
    if declared < 0:
        raise WireError(f"{CALL}: the zstd frame does not declare its content size (compress with it written)")
    if declared > cap:
        raise WireError(f"{CALL}: the zstd frame declares {declared} bytes, over this server's cap of {cap}")
    out = bytearray()
    reader = zstandard.ZstdDecompressor().stream_reader(body)
    try:
        while chunk := reader.read(min(1 << 20, declared - len(out) + 1)):
            out += chunk
            if len(out) > declared:
                raise WireError(f"{CALL}: the zstd body holds more than the {declared} bytes its frame declares")
    except zstandard.ZstdError as exc:
        raise WireError(f"{CALL}: the zstd body does not decompress ({exc})") from None
    if len(out) != declared:
        raise WireError(f"{CALL}: the zstd body holds {len(out)} bytes, its frame declares {declared}")
    return bytes(out)


def _values(raw: bytes, dtype: type, where: str) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        raise WireError(f"{where}: {len(raw)} bytes is not a whole number of {np.dtype(dtype).name} values")
    return np.frombuffer(raw, dtype=dtype)


def _tensor(msg, length: int, where: str) -> np.ndarray:
    """A loss input as a 1-D array of `length` values (one per input token): dense bytes of
    exactly that many values, or CSR entries inside [0, length) (unlisted entries are 0)."""
    pb = _pb()
    name = pb.DType.Name(msg.dtype) if msg.dtype in pb.DType.values() else str(msg.dtype)
    if name not in _NUMPY:
        raise WireError(f"{where}: dtype {name} is not supported (float32, int64, int32)")
    dtype, shape = _NUMPY[name], list(msg.shape)
    if shape not in ([], [length]):
        raise WireError(f"{where} has shape {shape}, not [{length}] (one value per input token)")
    if not msg.HasField("sparse_csr"):
        values = _values(msg.dense, dtype, where)
        if len(values) != length:
            raise WireError(f"{where} has {len(values)} values, not {length} (one per input token)")
        return values
    csr = msg.sparse_csr
    values = _values(csr.values, dtype, f"{where}.values")
    crow = _values(csr.crow_indices, np.int64, f"{where}.crow_indices")
    col = _values(csr.col_indices, np.int64, f"{where}.col_indices")
    if len(crow) != 2 or crow[0] != 0 or crow[1] != len(col) or len(col) != len(values):
        raise WireError(
            f"{where}: sparse CSR of one row needs crow_indices [0, nnz] and nnz col_indices and values "
            f"(got {len(crow)} crow_indices, {len(col)} col_indices, {len(values)} values)"
        )
    if len(col) and (col.min() < 0 or col.max() >= length):
        raise WireError(f"{where}: a CSR column index is outside [0, {length})")
    dense = np.zeros(length, dtype=dtype)
    dense[col] = values
    return dense


def _tokens(d, i: int) -> np.ndarray:
    parts = []
    for chunk in d.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise WireError(f"{CALL}: data[{i}].model_input: only text chunks are supported (got {kind})")
        parts.append(_values(chunk.encoded_text.tokens, np.int32, f"{CALL}: data[{i}].model_input tokens"))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def _config(msg) -> dict[str, float | str]:
    out: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():
        out[k] = v.text if v.WhichOneof("value") == "text" else float(v.number)
    return out


def _token_count(msg, limits: WireLimits) -> None:
    """Token counts from the byte lengths alone, before any list is built."""
    total = 0
    for i, d in enumerate(msg.data):
        n = sum(len(c.encoded_text.tokens) // 4 for c in d.model_input)
        if n == 0 or n > limits.max_datum_tokens:
            raise WireError(
                f"{CALL}: data[{i}] has {n} tokens; this server takes 1 to {limits.max_datum_tokens} a datum"
            )
        total += n
        if total > limits.max_call_tokens:
            raise WireError(
                f"{CALL}: the call has over {limits.max_call_tokens} tokens, this server's cap per call "
                "(send fewer datums a call)"
            )


def _spans(msgs, where: str) -> list[Span]:
    spans = []
    for k, msg in enumerate(msgs):
        kind = msg.WhichOneof("span")
        if kind is None:
            raise WireError(f"{where}[{k}]: a provenance span names neither prompt nor sampled tokens")
        run = getattr(msg, kind)
        if run.offset < 0 or run.length < 0 or not run.sequence_id:
            raise WireError(f"{where}[{k}]: a span needs a sequence_id, offset >= 0 and length >= 0")
        spans.append(Span(kind == "sampled_tokens", run.sequence_id, int(run.offset), int(run.length)))
    return spans


def read_forward_backward(body: bytes, encoding: str | None, limits: WireLimits) -> FwdBwdRequest:
    """Parse and check a `/api/v1/forward_backward` body (zstd-compressed when `encoding` says so).

    Raises:
        WireError: the body is not a ForwardBackwardRequest within `limits` (the message says why).
    """
    msg = _pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(decompress(body, encoding, limits.max_bytes))
    except WireError:
        raise
    except Exception as exc:  # protobuf's DecodeError: a body that is not this message
        raise WireError(f"{CALL}: body is not a ForwardBackwardRequest ({exc})") from None
    _token_count(msg, limits)
    data = []
    for i, d in enumerate(msg.data):
        tokens = _tokens(d, i)
        inputs = {
            k: _tensor(v, len(tokens), f"{CALL}: data[{i}].loss_fn_inputs.{k}") for k, v in d.loss_fn_inputs.items()
        }
        input_spans = _spans(d.model_input_spans, f"{CALL}: data[{i}].model_input_spans")
        target_spans = _spans(d.loss_fn_input_spans, f"{CALL}: data[{i}].loss_fn_input_spans")
        data.append(WireDatum(tokens.tolist(), inputs, input_spans, target_spans))
    return FwdBwdRequest(msg.model_id, msg.loss_fn, msg.forward_only, data, _config(msg))


def _batched(arrays: list[np.ndarray], dtype: type, pb_dtype: DType.ValueType):
    pb = _pb()
    parts = [np.ascontiguousarray(a, dtype=dtype).ravel() for a in arrays]
    offsets = np.cumsum([0] + [p.nbytes for p in parts]).astype(np.int64)
    return pb.BatchedTensor(data=b"".join(p.tobytes() for p in parts), offsets=offsets.tobytes(), dtype=pb_dtype)


def write_forward_backward(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A `ForwardBackwardOutput`: per-datum float32 outputs (e.g. `logprobs`) and the metrics."""
    pb = _pb()
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in outputs[0] if outputs else []:
        record.fields[name].CopyFrom(_batched([o[name] for o in outputs], np.float32, pb.DTYPE_FLOAT32))
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    for k, v in metrics.items():
        msg.metrics[k] = float(v)
    return msg.SerializeToString()


@dataclass
class WireSample:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool
    """True: a stop token or string ended it; False: `max_tokens` did."""


def write_sample(samples: list[WireSample], prompt_logprobs: list[float] | None) -> bytes:
    """A `SampleResponse`: tokens, their log-probs and stop reasons; prompt log-probs if asked
    (NaN where none is defined: the first prompt token)."""
    pb = _pb()
    msg = pb.SampleResponse()
    for s in samples:
        seq = msg.sequences.add()
        seq.stop_reason = pb.STOP_REASON_STOP if s.stopped else pb.STOP_REASON_LENGTH
        seq.tokens = np.asarray(s.tokens, dtype=np.int32).tobytes()
        seq.logprobs = np.asarray(s.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return msg.SerializeToString()
