#!/usr/bin/env python3
"""Encodes every corpus record with Hugging Face `tokenizers` (the reference) and writes,
per record: u32 n_ids, n_ids x u32 ids, u32 n_bytes, the decoded text (skip_special=False).
Raw bytes are turned into text with errors='replace' (U+FFFD per maximal ill-formed
subpart), which is what detserve's encoder does to invalid UTF-8.

usage: ref_encode.py [--add-special] TOKENIZER_JSON CORPUS OUT"""
import struct
import sys

from tokenizers import Tokenizer


def main():
    args = sys.argv[1:]
    add_special = args[0] == '--add-special'
    args = args[add_special:]
    tok = Tokenizer.from_file(args[0])
    data = open(args[1], 'rb').read()
    texts, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from('<I', data, off)
        texts.append(data[off + 4:off + 4 + n].decode('utf-8', 'replace'))
        off += 4 + n
    encs = tok.encode_batch(texts, add_special_tokens=add_special)
    with open(args[2], 'wb') as f:
        for e in encs:
            ids = e.ids
            f.write(struct.pack('<I', len(ids)))
            f.write(struct.pack(f'<{len(ids)}I', *ids))
            d = tok.decode(ids, skip_special_tokens=False).encode('utf-8')
            f.write(struct.pack('<I', len(d)))
            f.write(d)
    print(f"ref_encode: {args[0]}: {len(texts)} documents, {sum(len(e.ids) for e in encs)} tokens")


if __name__ == '__main__':
    main()
