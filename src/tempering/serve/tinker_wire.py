"""The Tinker API's protobuf bodies: forward/backward requests in, forward/backward outputs and
samples out (the rest of the API is JSON, validated by the client's own pydantic types).

The schema is the official SDK's (`tinker.proto.tinker_public_pb2`, the `tinker` extra), so
the server reads exactly what the client writes: a datum's tokens as int32 bytes, its loss
inputs as dense or sparse-CSR tensors; outputs as one `ArrayRecord` of per-datum slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tempering.errors import UserError


class WireError(UserError):
    """A request body the server cannot read; the message names the field."""


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


def _tensor(msg, where: str) -> np.ndarray:
    """A proto `Tensor` as a dense numpy array (CSR entries not listed are 0)."""
    pb = _pb()
    name = pb.DType.Name(msg.dtype)
    if name not in _NUMPY:
        raise WireError(f"{where}: dtype {name} is not supported (float32, int64, int32)")
    dtype, shape = _NUMPY[name], list(msg.shape)
    if not msg.HasField("sparse_csr"):
        arr = np.frombuffer(msg.dense, dtype=dtype)
        return arr.reshape(shape) if shape else arr
    csr = msg.sparse_csr
    values = np.frombuffer(csr.values, dtype=dtype)
    crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
    col = np.frombuffer(csr.col_indices, dtype=np.int64)
    rows, cols = (1, shape[0]) if len(shape) == 1 else (shape[0], int(np.prod(shape[1:])))
    dense = np.zeros((rows, cols), dtype=dtype)
    for r in range(min(rows, len(crow) - 1)):
        dense[r, col[crow[r] : crow[r + 1]]] = values[crow[r] : crow[r + 1]]
    return dense.reshape(shape)


def _config(msg) -> dict[str, float | str]:
    out: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():
        out[k] = v.text if v.WhichOneof("value") == "text" else float(v.number)
    return out


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


def read_forward_backward(body: bytes, encoding: str | None) -> FwdBwdRequest:
    """Parse a `/api/v1/forward_backward` body (zstd-compressed when `encoding` says so)."""
    if encoding == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body)
    msg = _pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError: a body that is not this message
        raise WireError(f"forward_backward: body is not a ForwardBackwardRequest ({exc})") from None
    data = []
    for i, d in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in d.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise WireError(f"data[{i}].model_input: only text chunks are supported (got {kind})")
            tokens += np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist()
        inputs = {k: _tensor(v, f"data[{i}].loss_fn_inputs.{k}") for k, v in d.loss_fn_inputs.items()}
        spans = _spans(d.model_input_spans, f"data[{i}].model_input_spans")
        data.append(WireDatum(tokens, inputs, spans, _spans(d.loss_fn_input_spans, f"data[{i}].loss_fn_input_spans")))
    return FwdBwdRequest(msg.model_id, msg.loss_fn, msg.forward_only, data, _config(msg))


def _batched(arrays: list[np.ndarray], dtype: type, pb_dtype: int):
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
