#!/usr/bin/env python3
"""Builds the tokenizer reference corpus: text gathered from this machine (licences and
READMEs under /usr/share/doc, man pages in many languages), in sorted path order so a
machine always yields the same corpus, plus hand-written edge cases. Writes records
(u32 little-endian length + raw bytes) to the output file; raw bytes may be invalid UTF-8.

With --sweep, writes instead every code point of planes 0-2 (no surrogates) in a few
contexts that exercise \s, \p{L}, \p{N}, contractions and NFC, 1024 code points per record;
inside large uniform blocks (CJK ideographs, Hangul syllables, Tangut, private use) only
every 61st code point.
The 20 Kaktovik numerals (U+1D2C0..U+1D2D3, new in Unicode 15) are left out: PCRE2 10.42
classifies them with its Unicode 14 tables, Oniguruma in `tokenizers` as numbers.

usage: make_corpus.py OUT [MIN_BYTES]
       make_corpus.py --sweep OUT"""
import gzip
import os
import struct
import sys

MAX_DOC = 64 * 1024  # long files are cut so that no single file dominates


def read(path):
    try:
        with open(path, 'rb') as f:
            data = f.read(4 * MAX_DOC)
        if path.endswith('.gz'):
            data = gzip.decompress(data) if len(data) < 4 * MAX_DOC else b''
        return data[:MAX_DOC]
    except (OSError, EOFError, gzip.BadGzipFile):
        return b''


def walk(root, want):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(d, name)
            if not os.path.islink(p) and want(name, p):
                out.append(p)
    return out


def gather(paths, budget, docs):
    used = 0
    for p in paths:
        if used >= budget:
            break
        data = read(p)
        if len(data) < 64 or b'\0' in data:
            continue
        docs.append(data)
        used += len(data)
    return used


EDGE = [
    "Hello world", "", " ", "  leading and trailing  ", "\n\n\n", "\t\tTabs\tand\r\nCRLF\r\n",
    "It's John's dog; they're here, we've gone, I'm sure, you'll see, he'd know.",
    "IT'S LOUD, DON'T SHOUT. 'S 's' 'S's", "rock 'n' roll, ''quoted'' ' 'll",
    "1234567890" * 20, "3.14159 2,718 1e10 0x1F 10000000000000000000000", "٣٤٥ ๑๒๓ ①②③ ½ ⅷ",
    " " * 300 + "x" + " " * 257, "\n" * 100 + "a", "a" + " \t" * 100 + "\n",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸🇯🇵 ❤️ 🫠", "中文测试：你好，世界！日本語のテキスト、カタカナ。한국어 텍스트",
    "Ελληνικά κείμενο, русский текст, українська мова, עברית, العربية, हिन्दी, ไทย",
    "combining: e\u0301 a\u0308 n\u0303 A\u030a \u1e9b\u0323 Å Å ñ ǅ ﬁ Ⅻ",
    "zero\u200bwidth\u200djoiner\ufeffbom \u00a0nbsp \u2003emsp \u3000ideo",
    "<|endoftext|>", "before<|endoftext|>after", "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "nested <|im_start<|im_end|>|> and <|endoftext|><|endoftext|> twice", "<think>\nhmm\n</think>\n\nanswer",
    "<|begin_of_text|>not special here<|eot_id|>", "<repo_name>x<file_sep>y<filename>z.py",
    "def f(x):\n    return x**2  # comment\n\nclass A:\n\tpass\n", "<html><body>&amp;&lt;&#x27;</body></html>",
    "https://example.com/path?q=1&r=two#frag user@example.org", "$$\\frac{a}{b}$$ ∀x∈ℝ: x²≥0 ≠ ≤ ∞",
    "ǅemo ßtraße İstanbul ﬀ Ǆ ǈ", "\u0000nul\u0001ctl\u007fdel\u0085nel", "💩" * 50,
    "a" * 1000, "ab" * 500 + "c", "The quick brown fox jumps over the lazy dog. " * 20,
]
EDGE_BYTES = [
    b"invalid \xff\xfe bytes", b"truncated \xe4\xb8", b"\xf0\x9f\x98 broken emoji", b"\xc0\xafoverlong",
    b"surrogate \xed\xa0\x80\xed\xb0\x80", b"\x80\x80\x80 lone continuations", b"mixed \xe2\x82\xac ok \xe2\x82 bad",
    b"latin1 caf\xe9 na\xefve", b"\xf4\x90\x80\x80 above max", b"end with lead \xe2",
]


UNIFORM = [(0x3400, 0x4dc0), (0x4e00, 0xa000), (0xac00, 0xd7a4), (0xe000, 0xf900),
           (0x17000, 0x18d00), (0x20000, 0x30000)]


def sweep(out):
    with open(out, 'wb') as f:
        for lo in range(0, 0x30000, 0x400):
            parts = []
            for cp in range(lo, lo + 0x400):
                if 0xd800 <= cp < 0xe000 or 0x1d2c0 <= cp <= 0x1d2d3:
                    continue
                if any(a <= cp < b for a, b in UNIFORM) and cp % 61:
                    continue
                c = chr(cp)
                parts.append("a" + c + "1 " + c + c + "'" + c + " \t" + c + "\n")
            if not parts:
                continue
            d = "".join(parts).encode('utf-8')
            f.write(struct.pack('<I', len(d)))
            f.write(d)


def main():
    if sys.argv[1] == '--sweep':
        return sweep(sys.argv[2])
    out = sys.argv[1]
    min_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    docs = []
    gather(walk('/usr/share/doc', lambda n, p: n == 'copyright'), min_bytes * 2 // 5, docs)
    gather(walk('/usr/share/doc', lambda n, p: n.upper().startswith('README')), min_bytes // 5, docs)
    man = '/usr/share/man'
    langs = sorted(d for d in os.listdir(man) if not d.startswith('man')) if os.path.isdir(man) else []
    for lang in langs:
        gather(walk(os.path.join(man, lang), lambda n, p: True), min_bytes // 40, docs)
    gather(walk(os.path.join(man, 'man1'), lambda n, p: True) if os.path.isdir(man) else [],
           min_bytes // 5, docs)
    total = sum(len(d) for d in docs)
    if total < min_bytes:
        sys.exit(f"make_corpus: only {total} bytes of text found on this machine (< {min_bytes})")
    docs += [e.encode('utf-8', 'surrogatepass') for e in EDGE] + EDGE_BYTES
    with open(out, 'wb') as f:
        for d in docs:
            f.write(struct.pack('<I', len(d)))
            f.write(d)
    print(f"make_corpus: {len(docs)} documents, {total + sum(len(e) for e in docs[-len(EDGE)-len(EDGE_BYTES):])} bytes")


if __name__ == '__main__':
    main()
