"""Build a tiny random-weight Llama locally (no hub access), in 0.2 s.

    OUT/hf/              config.json, generation_config.json, tokenizer.json, tokenizer_config.json,
                         special_tokens_map.json, model.safetensors   (vLLM / transformers)
    OUT/tiny-llama.gguf  (llama.cpp)

Random weights emit EOS at random: benchmark with ``ignore_eos``. They never emit a token that is not
printable ASCII by itself (its output row is zero), so the answers are gibberish made of words' pieces
that still decode as text. Needs numpy, tokenizers, gguf
(``pip install 'lair[engines]'``).

``answer="69"`` makes a *scripted* model instead: every layer's output projections are zero, so the
hidden state at a position is its own token's embedding, and the embeddings and output head form a
chain (any other token -> the answer's first token -> ... -> its last -> EOS). Greedy decoding then
answers exactly ``answer`` to every prompt: a real engine run whose right answers are known (an
evaluation's positive case). The answer's tokens must be distinct single characters of the vocabulary.

    python -m lair.testing.tiny_model OUT [--hidden 128 --layers 2 --heads 2 --vocab 512 --ctx 2048]
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPECIALS = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "is",
    "are",
    "was",
    "be",
    "model",
    "server",
    "token",
    "stream",
    "chat",
    "hello",
    "world",
    "benchmark",
    "latency",
    "throughput",
    "request",
    "response",
    "prompt",
    "recipe",
    "node",
    "docker",
    "engine",
    "fast",
    "slow",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
]

__all__ = ["GGUF_NAME", "make_tiny_model"]
GGUF_NAME = "tiny-llama.gguf"


GENERATOR = 2
"""Bumped whenever the same arguments build a different model (2: no token that is not printable
ASCII is ever emitted); a folder built by another generator or with other arguments is built again."""
STAMP_NAME = "tiny-model.json"


def _corpus(n: int = 3000, seed: int = 0) -> Iterator[str]:
    rnd = random.Random(seed)
    for _ in range(n):
        yield " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 20))) + rnd.choice(".!?,")


def _tokenizer(vocab: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), tr)
    return tok


def _write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    import numpy as np

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off, blobs = 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def _script(t: dict[str, Any], chain: list[int], eos: int) -> None:
    """Overwrite ``t`` in place so that greedy decoding walks ``chain`` then EOS (see the docstring)."""
    import numpy as np

    emb, head = t["model.embed_tokens.weight"], t["lm_head.weight"]
    h = emb.shape[1]
    if len(chain) + 1 > h:
        raise ValueError(f"a scripted answer holds at most {h - 1} tokens")
    for name, arr in t.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            arr[:] = 0  # no layer writes to the residual stream
    basis = np.eye(h, dtype=np.float32)
    emb[:] = basis[0]  # every token not in the chain: state 0
    head[:] = 0
    for k, tok in enumerate(chain):
        emb[tok] = basis[k + 1]
    for k, nxt in enumerate([*chain, eos]):
        head[nxt] = 5.0 * basis[k]  # state k -> the chain's next token (logit ~56 against 0)


def _never_emit(t: dict[str, Any], tok: Any, voc: dict[str, int]) -> None:
    """Zero the output rows of the tokens that do not decode to printable ASCII on their own (the
    byte-level alphabet's bytes above 0x7f and its control bytes) and of the special tokens but EOS:
    their logit is then 0 against ~450 random ones, so greedy decoding never picks them and the
    answers decode as text (the bench's validity gate refuses bytes that are not UTF-8)."""
    head, eos = t["lm_head.weight"], voc["</s>"]
    for token, i in voc.items():
        text = tok.decode([i])
        printable = bool(text) and all(" " <= ch <= "~" for ch in text)
        if i != eos and (token in SPECIALS or not printable):
            head[i] = 0.0


def _weights(v: int, h: int, f: int, layers: int, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)

    def r(*s: int) -> Any:
        return (rng.standard_normal(s) * 0.02).astype(np.float32)

    t: dict[str, Any] = {
        "model.embed_tokens.weight": r(v, h),
        "model.norm.weight": np.ones(h, np.float32),
        "lm_head.weight": r(v, h),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update(
            {
                p + "input_layernorm.weight": np.ones(h, np.float32),
                p + "post_attention_layernorm.weight": np.ones(h, np.float32),
                p + "self_attn.q_proj.weight": r(h, h),
                p + "self_attn.k_proj.weight": r(h, h),
                p + "self_attn.v_proj.weight": r(h, h),
                p + "self_attn.o_proj.weight": r(h, h),
                p + "mlp.gate_proj.weight": r(f, h),
                p + "mlp.up_proj.weight": r(f, h),
                p + "mlp.down_proj.weight": r(h, f),
            }
        )
    return t


_GGUF_TOP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_GGUF_SUB = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _write_gguf(
    path: Path, cfg: dict[str, Any], vocab: dict[str, int], merges: list[Any], t: dict[str, Any]
) -> None:
    import gguf

    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    g = gguf.GGUFWriter(str(path), "llama")
    g.add_name("tiny-llama-random")
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(h)
    g.add_block_count(cfg["num_hidden_layers"])
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(heads)
    g.add_head_count_kv(heads)
    g.add_rope_dimension_count(h // heads)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_rope_freq_base(10000.0)
    g.add_vocab_size(len(vocab))
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    inv = sorted(vocab.items(), key=lambda kv: kv[1])
    g.add_tokenizer_model("gpt2")
    g.add_tokenizer_pre("default")
    g.add_token_list([tok for tok, _ in inv])
    g.add_token_types(
        [gguf.TokenType.CONTROL if tok in SPECIALS else gguf.TokenType.NORMAL for tok, _ in inv]
    )
    g.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    g.add_bos_token_id(vocab["<s>"])
    g.add_eos_token_id(vocab["</s>"])
    g.add_unk_token_id(vocab["<unk>"])
    g.add_pad_token_id(vocab["</s>"])
    g.add_add_bos_token(False)
    g.add_chat_template(CHAT_TEMPLATE)
    for name, arr in t.items():
        if name in _GGUF_TOP:
            gn = _GGUF_TOP[name]
        else:
            _, _, i, rest = name.split(".", 3)
            gn = f"blk.{i}.{_GGUF_SUB[rest.rsplit('.', 1)[0]]}.weight"
        g.add_tensor(gn, arr)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def make_tiny_model(
    out: str | Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 2,
    ffn: int = 256,
    vocab: int = 512,
    ctx: int = 2048,
    seed: int = 0,
    answer: str | None = None,
) -> Path:
    """Write the HF folder and the GGUF under ``out``; return the GGUF path. Idempotent: a folder this
    generator built with the same arguments (its ``tiny-model.json``) is kept as it is. With
    ``answer``, the model is scripted to answer it to every prompt (module docstring)."""
    out = Path(out)
    gguf_path = out / GGUF_NAME
    params: dict[str, Any] = {"generator": GENERATOR, "hidden": hidden, "layers": layers, "heads": heads}
    params |= {"ffn": ffn}
    params |= {"vocab": vocab, "ctx": ctx, "seed": seed, "answer": answer}
    stamp = out / STAMP_NAME
    if gguf_path.exists() and (out / "hf" / "config.json").exists() and _stamp(stamp) == params:
        return gguf_path
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(vocab)
    tok.save(str(hf / "tokenizer.json"))
    voc: dict[str, int] = tok.get_vocab()
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "</s>",
        "model_max_length": ctx,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (hf / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=1))
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"}
    (hf / "special_tokens_map.json").write_text(json.dumps(specials))
    bos, eos = voc["<s>"], voc["</s>"]
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": hidden // heads,
        "vocab_size": len(voc),
        "max_position_embeddings": ctx,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": eos,
    }
    (hf / "config.json").write_text(json.dumps(cfg, indent=1))
    (hf / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))
    t = _weights(len(voc), hidden, ffn, layers, seed)
    _never_emit(t, tok, voc)
    if answer is not None:
        chain = [voc[ch] for ch in answer]
        if len(set(chain)) != len(chain):
            raise ValueError(f"a scripted answer needs distinct characters: {answer!r}")
        _script(t, chain, eos)
    _write_safetensors(hf / "model.safetensors", t)
    merges = json.loads((hf / "tokenizer.json").read_text())["model"]["merges"]
    tmp = out / (GGUF_NAME + ".tmp")
    _write_gguf(tmp, cfg, voc, merges, t)
    tmp.replace(gguf_path)
    stamp.write_text(json.dumps(params))
    return gguf_path


def _stamp(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lair.testing.tiny_model", description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--answer", default=None, help="script the model to answer this to every prompt")
    a = ap.parse_args(argv)
    try:
        made = make_tiny_model(
            a.out, hidden=a.hidden, layers=a.layers, heads=a.heads, vocab=a.vocab, ctx=a.ctx, answer=a.answer
        )
    except ModuleNotFoundError as exc:  # one line for the hook's failure, not a traceback
        print(f"error: {exc}: pip install 'lair[engines]' on this node", file=sys.stderr)
        return 2
    print(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
