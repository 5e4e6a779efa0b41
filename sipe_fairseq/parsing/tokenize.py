"""The one rule-based tokenizer for raw English sentences (UD EWT / PTB conventions).

Used wherever raw text needs words without a parser's own tokenizer: SyntaxGym regions, the
``none`` tree source (no tags), the ``hexatagger`` backend's raw-text input, and the words of a GLUE
sentence whose parse failed.
"""
import re
from typing import List

# Clitics split off the end of a word as UD EWT / the PTB do: "isn't" -> "is n't", "can't" -> "ca n't",
# "John's" -> "John 's". The curly apostrophe is accepted too.
_CLITIC = re.compile(r"^(.+?)(n['\u2019]t|['\u2019](?:s|re|ve|ll|d|m))$", re.IGNORECASE)
_LEADING = "\"'`([{\u2018\u201c"
_TRAILING = ".,;:!?)]}\"'\u2019\u201d"
# abbreviations keep their period: U.S., e.g., an initial (J.), a title; a lowercase letter + "." ends a sentence
_ABBREVIATION = re.compile(r"^(?:[A-Za-z]\.){2,}$|^[A-Z]\.$|^(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|Inc|Co|Corp|Ltd|No)\.$")
_WHOLE = re.compile(r"^(?:\.\.\.|--+|``|''|[^\w\s]|n['\u2019]t|['\u2019](?:s|re|ve|ll|d|m))$", re.IGNORECASE)


def split_words(text: str) -> List[str]:
    """Split raw text into UD/PTB-style words: whitespace, then leading ``" ' ` ( [ {`` and
    trailing ``. , ; : ! ? ) ] } " '`` and ``...`` become words of their own (a trailing period stays
    on abbreviations like ``U.S.``, ``Mr.`` or an initial ``J.``, not after a lowercase letter: ``b.``),
    then the clitics ``n't 's 're 've 'll 'd 'm`` are split
    off (``can't`` -> ``ca n't``). Hyphenated words and numbers like ``3.5`` or ``1,000`` stay whole.

    >>> split_words('"The dog\\'s owner," she said, "isn\\'t here."')
    ['"', 'The', 'dog', "'s", 'owner', ',', '"', 'she', 'said', ',', '"', 'is', "n't", 'here', '.', '"']
    """
    words: List[str] = []
    for chunk in text.split():
        lead, trail = [], []
        while len(chunk) > 1 and not _WHOLE.match(chunk):
            if chunk.startswith("``"):
                lead.append("``")
                chunk = chunk[2:]
            elif chunk[0] in _LEADING:
                lead.append(chunk[0])
                chunk = chunk[1:]
            elif chunk.endswith("...") or chunk.endswith("''"):
                trail.append(chunk[-3:] if chunk.endswith("...") else "''")
                chunk = chunk[:-len(trail[-1])]
            elif chunk[-1] in _TRAILING and not (chunk[-1] == "." and _ABBREVIATION.match(chunk)):
                trail.append(chunk[-1])
                chunk = chunk[:-1]
            else:
                break
        core = []
        m = _CLITIC.match(chunk) if chunk else None
        if m and not _WHOLE.match(chunk):
            core = [m.group(1), m.group(2)]
        elif chunk:
            core = [chunk]
        words += lead + core + trail[::-1]
    return words
