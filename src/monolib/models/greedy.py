"""A greedy decoder written as an ONNX ``Loop`` around a real model's decoder step
(issue 13's proof of ``Loop``): the g2p-id LSTM decoder (``g2p_id_decoder`` in
:data:`~.fetch.MODELS`) fed back its own argmax, one-hot, until a stop token or the
length limit.

:func:`greedy_decoder_loop` builds the model with ``onnx.helper`` (``onnx`` is imported
when it is called; the rest of :mod:`monolib.models` does not need it). Inputs:
``start`` float32 ``[1, 1, V]`` (the one-hot first token), ``h0``/``c0`` float32
``[1, H]`` (the LSTM state, e.g. an encoder's), ``stop`` int64 scalar (the stop token,
read by the body from the outer scope). Outputs: ``tokens`` int64 ``[T]`` (every
token emitted, the stop token included, ``T <= max_len``), ``h``/``c`` the final state.

:func:`encode_word` and :func:`phonemes` are g2p-id's own pre- and post-processing
(``g2p_id/lstm.py`` and its ``config.json``, ``g2id.json``, ``p2id.json`` of
``g2p-id-py==0.4.2``): a word one-hot over :data:`GRAPHEMES`, padded with spaces to
:data:`MAX_WORD`, for the encoder (``g2p_id_encoder``), whose two outputs are the
decoder's initial ``h``/``c``; tokens index :data:`PHONEMES`, ``BOS`` starts, ``EOS``
stops, at most ``MAX_TOKENS`` tokens.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["BOS", "EOS", "GRAPHEMES", "MAX_TOKENS", "MAX_WORD", "PHONEMES", "encode_word",
           "greedy_decoder_loop", "phonemes"]

logger = logging.getLogger(__name__)

#: the encoder's characters, by index (g2id.json)
GRAPHEMES = "'-abcdefghijklmnopqrstuvwyz "
#: the decoder's tokens, by index (p2id.json): tab starts, newline ends
PHONEMES = "\t\n-abdefghijklmnoprstuvwz\u014b\u0259\u0272\u0283\u0292\u0294 "
BOS, EOS = 0, 1
#: max_encoder_seq_length; the decoder stops after max_decoder_seq_length + 1 tokens
MAX_WORD, MAX_TOKENS = 24, 26


def encode_word(word: str):
    """The encoder input ``[1, MAX_WORD, len(GRAPHEMES)]`` float32 of a lowercase
    word (g2p-id's ``LSTM.predict``)."""
    import numpy as np

    x = np.zeros((1, MAX_WORD, len(GRAPHEMES)), np.float32)
    for i, ch in enumerate(word[:MAX_WORD]):
        x[0, i, GRAPHEMES.index(ch)] = 1.0
    x[0, len(word):, GRAPHEMES.index(" ")] = 1.0
    return x


def phonemes(tokens) -> str:
    """The phoneme string of decoder tokens (up to the end token)."""
    out = "".join(PHONEMES[int(t)] for t in tokens)
    return out.split(PHONEMES[EOS])[0]


def greedy_decoder_loop(step: Any, max_len: int = 32) -> Any:
    """The greedy decoding ``Loop`` around decoder-step model ``step``.

    Parameters
    ----------
    step : str, os.PathLike or onnx.ModelProto
        A decoder step with inputs (previous token one-hot ``[1, 1, V]``, ``h``
        ``[1, H]``, ``c`` ``[1, H]``) and outputs (probabilities ``[1, 1, V]``, ``h``,
        ``c``), like g2p-id's ``decoder_model.onnx``.
    max_len : int
        The Loop's trip count ``M`` (a constant: the scan output's bound).

    Returns
    -------
    onnx.ModelProto
        Checked with ``onnx.checker``; the step's opset.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if not isinstance(step, onnx.ModelProto):
        step = onnx.load(str(step))
    sg = step.graph
    vocab = sg.input[0].type.tensor_type.shape.dim[2].dim_value
    hidden = sg.input[1].type.tensor_type.shape.dim[1].dim_value
    formal = ["tok_in", "h_in", "c_in"]
    results = ["probs", "h_out", "c_out"]
    rename = {i.name: n for i, n in zip(sg.input, formal)}
    rename.update({o.name: n for o, n in zip(sg.output, results)})

    def name(x: str) -> str:
        return "" if not x else rename.get(x, f"step/{x}")

    nodes = []
    for n in sg.node:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        c.name = f"step/{n.name}"
        c.input[:] = [name(x) for x in n.input]
        c.output[:] = [name(x) for x in n.output]
        nodes.append(c)
    inits = []
    for t in sg.initializer:
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = name(t.name)
        inits.append(c)
    inits += [
        numpy_helper.from_array(np.array(vocab, np.int64), "depth"),
        numpy_helper.from_array(np.array([0, 1], np.float32), "onehot_values"),
        numpy_helper.from_array(np.array([0, 1], np.int64), "both_axes"),
    ]
    nodes += [
        helper.make_node("ArgMax", ["probs"], ["tok_id"], axis=-1, keepdims=0),  # [1, 1]
        helper.make_node("OneHot", ["tok_id", "depth", "onehot_values"], ["tok_out"], axis=-1),
        helper.make_node("Equal", ["tok_id", "stop"], ["is_stop"]),
        helper.make_node("Not", ["is_stop"], ["go_on"]),
        helper.make_node("Squeeze", ["go_on", "both_axes"], ["cond_out"]),
        helper.make_node("Squeeze", ["tok_id", "both_axes"], ["token"]),
    ]
    f = TensorProto.FLOAT
    body = helper.make_graph(
        nodes, "greedy_step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("tok_in", f, [1, 1, vocab]),
         helper.make_tensor_value_info("h_in", f, [1, hidden]),
         helper.make_tensor_value_info("c_in", f, [1, hidden])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("tok_out", f, [1, 1, vocab]),
         helper.make_tensor_value_info("h_out", f, [1, hidden]),
         helper.make_tensor_value_info("c_out", f, [1, hidden]),
         helper.make_tensor_value_info("token", TensorProto.INT64, [])],
        initializer=inits)
    loop = helper.make_node("Loop", ["max_len", "true", "start", "h0", "c0"],
                            ["tok_last", "h", "c", "tokens"], body=body, name="greedy")
    graph = helper.make_graph(
        [loop], "greedy_decoder",
        [helper.make_tensor_value_info("start", f, [1, 1, vocab]),
         helper.make_tensor_value_info("h0", f, [1, hidden]),
         helper.make_tensor_value_info("c0", f, [1, hidden]),
         helper.make_tensor_value_info("stop", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["T"]),
         helper.make_tensor_value_info("h", f, [1, hidden]),
         helper.make_tensor_value_info("c", f, [1, hidden])],
        initializer=[numpy_helper.from_array(np.array(max_len, np.int64), "max_len"),
                     numpy_helper.from_array(np.array(True), "true")])
    model = helper.make_model(graph, opset_imports=list(step.opset_import),
                              ir_version=step.ir_version)
    onnx.checker.check_model(model)
    return model
