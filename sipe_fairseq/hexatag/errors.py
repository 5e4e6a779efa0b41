"""Errors raised by the hexatag core. All are ``ValueError`` subclasses."""


class HexatagError(ValueError):
    """A tag sequence or tree that cannot be encoded or decoded."""


class TreeError(HexatagError):
    """An ill-formed dependency tree (no single root, a cycle, a head out of range)."""


class NonProjectiveError(TreeError):
    """A non-projective tree given where a projective one is required (strict mode)."""


class ConlluError(HexatagError):
    """Malformed CoNLL-U input; the message names the file and line."""

    def __init__(self, path, line, message):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")
