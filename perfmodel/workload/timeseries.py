"""The non-transformer families of workloads/: stacked LSTM / GRU, temporal convolution (TCN) and
MLP, each expanded into the Layers of one micro-batch, unsharded (workload/builder.py calls them)."""

from __future__ import annotations

from perfmodel import precision as registry
from perfmodel.workload.graph import ACT_BYTES, Layer, Op
from perfmodel.workload.op_make import elementwise_op, gemm_op
from perfmodel.workload.spec import ModelSpec

__all__ = ["RNN_GATES", "mlp_layers", "rnn_layers", "tcn_layers"]


RNN_GATES = {"lstm": 4, "gru": 3}


def rnn_layers(spec: ModelSpec, b: int, s: int, precision: str) -> list[Layer]:
    """Stacked LSTM / GRU forecaster (torch.nn.LSTM / nn.GRU semantics: gates i,f,g,o or r,z,n;
    two bias vectors), each layer one fused recurrence as cuDNN and ATen run it.

    Per layer: the input projection of all s time steps is one GEMM [b·s, in] x [in, g·H]; the
    recurrent part is one `recurrence` op: s dependent GEMMs [b, H] x [H, g·H] with the gate
    math fused, issued by the host as one call (cuDNN cudnnRNNForward; ATen's lstm / gru op on the
    CPU), so it costs one kernel of host time, not one per step (see compute.recurrence.recurrence_cost)."""
    H = spec.hidden
    g = RNN_GATES[spec.family]
    el = registry.get(precision).weight_bytes
    layers: list[Layer] = []
    for i in range(spec.num_layers):
        inp = spec.input_size if i == 0 else H
        assert inp is not None
        step_bytes = b * (g * H + 2 * H + 2 * H) * ACT_BYTES  # gate pre-activations in, h (and c) in and out
        rec = Op(f"{spec.family}{i}_recurrent", "recurrence", flop=2.0 * b * g * H * H * s,
                 bytes=H * g * H * el + s * step_bytes, m=b, n=g * H, k=H, repeat=s, precision=precision,
                 weight_params=float(g * H * H + 2 * g * H), saved_bytes=b * s * (g * H + 2 * H) * ACT_BYTES,
                 kernels=1, bwd_kernels=2)
        ops = (gemm_op(f"{spec.family}{i}_input_proj", b * s, g * H, inp, precision), rec)
        params = g * H * (inp + H) + 2 * g * H
        layers.append(Layer(f"{spec.family}{i}", "block", 1, ops, params=params, params_full=params))
    out = spec.output_size or 1
    head = gemm_op("forecast_head", b, out, H, precision, bias=True)
    layers.append(Layer("head", "head", 1, (head,), params=H * out + out, params_full=H * out + out, recomputable=False))
    return layers


def tcn_layers(spec: ModelSpec, b: int, s: int, precision: str) -> list[Layer]:
    """Temporal convolution network (Bai et al. 2018): per level two dilated causal Conv1d of
    kernel k with ReLU, plus a 1x1 residual conv where channels change. Conv1d as implicit GEMM
    [b·s, C_in·k] x [C_in·k, C_out]."""
    C, k = spec.hidden, spec.kernel_size or 3
    layers: list[Layer] = []
    for i in range(spec.num_layers):
        cin = spec.input_size if i == 0 else C
        assert cin is not None
        ops = [
            gemm_op(f"tcn{i}_conv1", b * s, C, cin * k, precision, bias=True, saved=b * s * cin * ACT_BYTES),
            elementwise_op(f"tcn{i}_relu1", b * s * C, 1, 1, 1, saved=b * s * C * ACT_BYTES),
            gemm_op(f"tcn{i}_conv2", b * s, C, C * k, precision, bias=True, saved=b * s * C * ACT_BYTES),
            elementwise_op(f"tcn{i}_relu_add", b * s * C, 2, 1, 2, saved=b * s * C * ACT_BYTES),
        ]
        params = cin * k * C + C + C * k * C + C
        if cin != C:
            ops.append(gemm_op(f"tcn{i}_downsample", b * s, C, cin, precision, bias=True))
            params += cin * C + C
        layers.append(Layer(f"tcn{i}", "block", 1, tuple(ops), params=params, params_full=params))
    out = spec.output_size or 1
    head = gemm_op("forecast_head", b, out, C, precision, bias=True)
    layers.append(Layer("head", "head", 1, (head,), params=C * out + out, params_full=C * out + out, recomputable=False))
    return layers


def mlp_layers(spec: ModelSpec, b: int, precision: str) -> list[Layer]:
    """MLP: input -> num_layers hidden Linear+ReLU layers of width `hidden` -> output."""
    H = spec.hidden
    layers: list[Layer] = []
    widths = [spec.input_size or 1] + [H] * spec.num_layers
    for i in range(spec.num_layers):
        ops = (gemm_op(f"fc{i}", b, H, widths[i], precision, bias=True),
               elementwise_op(f"relu{i}", b * H, 1, 1, 1, saved=b * H * ACT_BYTES))
        p = widths[i] * H + H
        layers.append(Layer(f"fc{i}", "block", 1, ops, params=p, params_full=p))
    out = spec.output_size or 1
    head = gemm_op("out", b, out, H, precision, bias=True)
    layers.append(Layer("head", "head", 1, (head,), params=H * out + out, params_full=H * out + out, recomputable=False))
    return layers
