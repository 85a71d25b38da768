"""Deterministic tokenizer test corpus: varied strings that stress pre-tokenizers and merges.

``build_corpus()`` returns the same list on every run (seeded ``random.Random``, no I/O): English
prose, code, JSON, numbers and digit runs, CJK, emoji (with ZWJ sequences and skin tones),
combining marks, other scripts, runs of spaces/tabs/newlines/CRLF, Unicode spaces, leading and
trailing spaces, contractions in any case, and special-token text. ``mixed_text(n_bytes)`` glues
corpus strings into one large text for throughput benchmarks.

Characters whose UTF-8 bytes some real vocabulary cannot represent (C0 controls other than
tab/newline/CR/VT/FF) are left out on purpose: they raise TokenizerError, tested separately.
"""

from __future__ import annotations

import json
import random
import unicodedata

__all__ = ["SPECIAL_TEXTS", "build_corpus", "mixed_text"]

WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with", "his", "they", "I", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "capital", "France", "Paris", "tokenization", "tokenizer", "unbelievable", "internationalization", "GGUF", "llama", "Gemma", "SmolLM", "JSON", "schema", "grammar", "constrained", "decoding", "quantization", "matrix", "vector", "embedding", "attention", "transformer", "Hello", "HELLO", "hello", "World", "world's", "don't", "I'm", "you're", "we've", "they'll", "she'd", "it's", "O'Neil", "rock'n'roll"]

CODE = (
    'def f(x):\n    return x * 2\n',
    'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n',
    'const obj = {"a": 1, "b": [true, false, null]};',
    '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); }',
    'SELECT id, name FROM users WHERE age >= 21 ORDER BY name;',
    'fn main() -> Result<(), Box<dyn Error>> { Ok(()) }',
    '    if self._cache is None:\n        self._cache = {}\n',
    '<div class="x"><span>text</span></div>',
    'x = [i**2 for i in range(10) if i % 3 == 0]',
    '$ echo "$HOME" && ls -la ~/.config | grep -v \'^d\'',
    'λx.λy.x y  -- lambda calculus',
    'a += b; c -= d; e *= f; g /= h; i ^= j; k |= l; m &= n;',
    '/* comment */ // line comment\n# hash comment',
    'https://example.com/path?query=1&b=%20x#frag',
    'user@example.org, +1 (555) 010-9999',
)

CJK = "東京都は日本の首都です。我爱自然语言处理。한국어 문장입니다。漢字かなカナ交じり文、ｶﾀｶﾅ、ＡＢＣ１２３。"
SCRIPTS = (
    "Привет, мир! Это тест.", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "Xin chào thế giới", "Zażółć gęślą jaźń", "Ärger über Öl — Straße", "ﬁ ﬂ ﬀ ligatures",
    "ᚠᛇᚻ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "Ⅻ ⅷ ½ ¾ ² ³ ① ⑳", "٣٤٥ ۱۲۳ ४५६ 一二三",
)
EMOJI = (
    "🙂", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🤖✨", "☕", "🧑🏿‍💻", "😀😃😄😁", "🫠", "🦀🐍",
)
COMBINING = ("e\u0301", "a\u0308\u0304", "n\u0303", "Z\u0327\u0301", "\u0915\u094d\u0937", "o\u0328\u0301")
SPACES = (" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t ", "\u00a0",
          "\u3000", "\u2009", "\u200b", "\x0b", "\x0c", "\r", "    \n\n    ")
SPECIAL_TEXTS = (
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
    "<eos>", "<pad>", "<unk>", "</s>", "<s>", "<mask>", "[multimodal]", "<start_of_image>",
    "<unused0>", "<repo_name>", "<file_sep>", "<0x41>", "<|im_start|>user\nHi<|im_end|>\n",
    "<start_of_turn>model\nOK<end_of_turn>", "<table><tr><td>1</td></tr></table>", "<|im_end",
)
PUNCT = ("!!", "...", "?!", "—", "–", "“quoted”", "‘single’", "«guillemets»", "(", ")", "[]", "{}",
         "::", "->", "=>", "!=", "===", "#", "@@", "%", "&&", "||", "~", "^", "`", "'", '"', "'s",
         "'S", "'LL", "'Re", "'ve", "'d", "'m", "'t", "''", "¿", "¡", "§", "©", "®", "™", "°", "€",
         "£", "¥", "₿", "±", "×", "÷", "≤", "≥", "≠", "∞", "∑", "√", "∫", "→", "⇒", "★", "♪")


def _number(rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 25)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 8)}f}"
    if kind == 2:
        return f"{rng.uniform(0, 1):.3e}"
    if kind == 3:
        return "0x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(rng.randrange(1, 17)))
    if kind == 4:
        return ",".join(str(rng.randrange(1000)) for _ in range(rng.randrange(2, 6)))
    if kind == 5:
        return f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    if kind == 6:
        return "1" * rng.randrange(1, 40)
    return f"v{rng.randrange(10)}.{rng.randrange(100)}.{rng.randrange(1000)}"


def _json(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.choice(WORDS) + " " + rng.choice(WORDS)
    if kind == 1:
        return rng.randrange(-10000, 10000)
    if kind == 2:
        return round(rng.uniform(-100, 100), rng.randrange(1, 6))
    if kind == 3:
        return rng.choice([True, False, None, "", "ünïcödé", "東京", "🙂"])
    if kind in (4, 5):
        return {rng.choice(WORDS): _json(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    return [_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))]


def _prose(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(1, 25))]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    text = " ".join(words)
    return text + rng.choice([".", "!", "?", "", ",", ":", ";", " ..."])


def _piece(rng: random.Random) -> str:
    kind = rng.randrange(12)
    if kind == 0:
        return _prose(rng)
    if kind == 1:
        return rng.choice(CODE)
    if kind == 2:
        return json.dumps(_json(rng), ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, 2, "\t"]))
    if kind == 3:
        return _number(rng)
    if kind == 4:
        start = rng.randrange(len(CJK))
        return CJK[start:start + rng.randrange(1, 20)]
    if kind == 5:
        return rng.choice(SCRIPTS)
    if kind == 6:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randrange(1, 4)))
    if kind == 7:
        base = rng.choice(WORDS)
        text = base + rng.choice(COMBINING)
        return unicodedata.normalize(rng.choice(["NFD", "NFC", "NFKD"]), text) if rng.random() < 0.5 else text
    if kind == 8:
        return rng.choice(SPACES) * rng.randrange(1, 5)
    if kind == 9:
        return rng.choice(SPECIAL_TEXTS)
    if kind == 10:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randrange(1, 4)))
    # random code points from assigned, printable ranges
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x4E00, 0x9FFF),
              (0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x2000, 0x206F), (0x20000, 0x2A6DF)]
    out = []
    for _ in range(rng.randrange(1, 12)):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _clean(text: str) -> str:
    """Drop C0 controls other than \\t \\n \\v \\f \\r and lone surrogates."""
    return "".join(c for c in text if (ord(c) >= 0x20 or c in "\t\n\x0b\x0c\r") and not 0xD800 <= ord(c) < 0xE000)


def build_corpus(n: int = 2400, seed: int = 20261130) -> list[str]:
    """``n`` varied strings (deterministic for a given seed); the first ones are fixed edge cases."""
    rng = random.Random(seed)
    fixed = [
        "", " ", "  ", "\n", "\t", "\r\n", "Hello world", "Hello  world!!", " Hello", "Hello ",
        "  leading", "trailing  ", "12345", " 123", "1 2 3", "3.14159", "don't", "DON'T", "I'LL",
        "The capital of France is", "a\n\nb", "a \n b", "x\t\ty", "    indented", "\u00a0nbsp",
        *SPECIAL_TEXTS, *SCRIPTS, *EMOJI, *CODE,
    ]
    out = [_clean(s) for s in fixed]
    while len(out) < n:
        parts = [_piece(rng) for _ in range(rng.randrange(1, 5))]
        seps = [rng.choice(["", " ", " ", "\n", "  ", "\t"]) for _ in parts]
        text = "".join(p + s for p, s in zip(parts, seps))
        if rng.random() < 0.15:
            text = rng.choice(SPACES) + text
        if rng.random() < 0.15:
            text = text + rng.choice(SPACES)
        out.append(_clean(text))
    return out


def mixed_text(n_bytes: int = 1_000_000, seed: int = 7) -> str:
    """About ``n_bytes`` of UTF-8 text glued from corpus-style pieces (for throughput benches)."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        piece = _clean(_piece(rng) if rng.random() < 0.5 else _prose(rng)) + rng.choice([" ", "\n", " "])
        parts.append(piece)
        size += len(piece.encode("utf-8"))
    return "".join(parts)
