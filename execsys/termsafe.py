"""Text from outside execsys, made safe to show on a terminal.

Model ids from ``/v1/models``, engine versions and fingerprints, host names from an inventory, file
names, harness argv and PATH entries are chosen by someone else. Printed raw, an ESC sequence in one
sets the terminal's title or clears the screen, a newline forges an output line (``✓ same system``
under a line that said otherwise), and a right-to-left override shows a file name backwards. Two layers
keep them out:

- :func:`shown` for each such value where it is rendered (CLI and TUI): every control character,
  line break and bidirectional override becomes a visible escape (``\\x1b``, ``\\n``, ``\\u202e``), so the
  value stays on its line and reads as what it is.
- :func:`neutralise` on everything the CLI's consoles write (``console.RedactingStream``): the same
  characters are escaped except the line structure and the few sequences the terminal output layer
  emits itself (colour, and the cursor moves of a progress bar), so a value rendered without
  :func:`shown` still cannot drive the terminal.
"""

from __future__ import annotations

import re

# Bidirectional formatting characters (embeddings, overrides, isolates, marks) and the Unicode line and
# paragraph separators: they reorder or break what is shown without being seen.
_BIDI_AND_BREAKS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_BREAKS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# What the terminal output layer itself writes (rich): SGR colour, cursor show/hide, cursor up, erase line.
_OWN_SEQUENCE = re.compile(r"\x1b\[(?:[0-9;]*m|\?25[lh]|[0-9]*A|[0-2]?K)")
_STRAY = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI_AND_BREAKS}]")


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """``value`` as one line of visible text: control characters, line breaks and bidi overrides escaped."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(lambda m: _escape(m.group()), text)


def neutralise(text: str) -> str:
    """Output text with every control character escaped but newlines, tabs, carriage returns and the
    output layer's own sequences (see the module docstring)."""
    if not _STRAY.search(text):
        return text
    pieces: list[str] = []
    last = 0
    for own in _OWN_SEQUENCE.finditer(text):
        pieces.append(_STRAY.sub(lambda m: _escape(m.group()), text[last:own.start()]))
        pieces.append(own.group())
        last = own.end()
    pieces.append(_STRAY.sub(lambda m: _escape(m.group()), text[last:]))
    return "".join(pieces)
