#!/usr/bin/env python3
"""tools/make_bpe_goldens.py: a handmade GPT-2 byte-level BPE pair and its encodings by Hugging Face tokenizers.

A tool, never a build or test dependency: the C++ tests (tests/data/test_gpt2_bpe.cpp) read the committed files.

  python3 -m venv /tmp/bpe && /tmp/bpe/bin/pip install tokenizers
  /tmp/bpe/bin/python tools/make_bpe_goldens.py [--out tests/goldens/gpt2_bpe]

Writes, in OUT:
  vocab.json, merges.txt  GPT-2's file formats: the 256 byte symbols of GPT-2's bytes_to_unicode (ids 0..255 in byte
                          order) and MERGES below, each merge's result getting the next id; merges.txt starts with
                          "#version: 0.2". Small enough to check by hand, but with merges of merges, merges across the
                          space symbol "Ġ" and digits, and a multi-byte character ("é" = "Ã©").
  encodings.json          {"tokenizers_version", "cases": [{"text", "ids"}]}: each text of TEXTS encoded by
                          tokenizers' models.BPE(vocab, merges) with the ByteLevel pre-tokenizer (GPT-2's regex,
                          add_prefix_space=False), i.e. what GPT2Tokenizer gives for these files.
Checks (exit 1 on failure): every encoding decodes back to its text.
"""
import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "n d", "Ġa nd", "i n", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2",
          "12 3", "Ã ©", "c Ã©", "' s", "e r", "Ġ Ġ", "Ċ Ċ"]
TEXTS = ["the world and the rest", "hello world", " the", "caf\u00e9 123 1234", "it's her's", "tab\there",
         "two  spaces   and\n\nnewlines\n", "\u00e9t\u00e9 \u4e2d\u6587 \U0001F600!", "", "   ", "a\r\nb",
         "The THE tHe 12a3 x1 \u00bd \u00b2", "don't we'll they've I'm you'd"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/goldens/gpt2_bpe")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    for m in MERGES:
        left, right = m.split(" ")
        vocab[left + right] = len(vocab)
    with open(os.path.join(a.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(a.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")
    tok = Tokenizer(models.BPE(vocab, [tuple(m.split(" ")) for m in MERGES]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    cases = []
    for t in TEXTS:
        ids = tok.encode(t).ids
        if tok.decode(ids) != t:
            raise SystemExit(f"{t!r} does not round-trip: {tok.decode(ids)!r}")
        cases.append({"text": t, "ids": ids})
    import tokenizers
    with open(os.path.join(a.out, "encodings.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(f"wrote {a.out}: {len(vocab)} ids, {len(MERGES)} merges, {len(cases)} encodings")


if __name__ == "__main__":
    main()
