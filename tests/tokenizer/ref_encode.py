#!/usr/bin/env python3
"""Encodes every corpus record with Hugging Face `tokenizers` (the reference) and writes,
per record: u32 n_ids, n_ids x u32 ids, u32 n_bytes, the decoded text (skip_special=False).
Raw bytes are turned into text with errors='replace' (U+FFFD per maximal ill-formed
subpart), which is what detserve's encoder does to invalid UTF-8.

With --encode-special-tokens, special tokens written in the text are encoded as plain text
(the reference for ds_tokenizer_encode_untrusted).

usage: ref_encode.py [--add-special] [--encode-special-tokens] TOKENIZER_JSON CORPUS OUT [CORPUS OUT ...]"""
import struct
import sys

from tokenizers import Tokenizer


def encode_file(tok, corpus, out, add_special):
    data = open(corpus, 'rb').read()
    texts, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from('<I', data, off)
        texts.append(data[off + 4:off + 4 + n].decode('utf-8', 'replace'))
        off += 4 + n
    encs = tok.encode_batch(texts, add_special_tokens=add_special)
    with open(out, 'wb') as f:
        for e in encs:
            ids = e.ids
            f.write(struct.pack('<I', len(ids)))
            f.write(struct.pack(f'<{len(ids)}I', *ids))
            d = tok.decode(ids, skip_special_tokens=False).encode('utf-8')
            f.write(struct.pack('<I', len(d)))
            f.write(d)
    return len(texts), sum(len(e.ids) for e in encs)


def main():
    args = sys.argv[1:]
    add_special = '--add-special' in args
    special_as_text = '--encode-special-tokens' in args
    args = [a for a in args if a not in ('--add-special', '--encode-special-tokens')]
    tok = Tokenizer.from_file(args[0])
    tok.encode_special_tokens = special_as_text
    for corpus, out in zip(args[1::2], args[2::2]):
        docs, toks = encode_file(tok, corpus, out, add_special)
        print(f"ref_encode: {args[0]} on {corpus}: {docs} documents, {toks} tokens")


if __name__ == '__main__':
    main()
