"""``sipe-user-dir``: print the installed plugin's directory, the path fairseq's ``--user-dir`` (and
``common.user_dir`` of ``fairseq-hydra-train``) needs, so that commands run from any directory::

    fairseq-train DATA --user-dir "$(sipe-user-dir)" --task hexatag_lm ...
    fairseq-hydra-train --config-dir CONFIG_DIR --config-name NAME common.user_dir="$(sipe-user-dir)" ...

Also ``python -m sipe_fairseq.cli.user_dir``. Imports neither torch nor fairseq (fast); exit status 0.
"""
import argparse
from pathlib import Path
from typing import List, Optional

import sipe_fairseq


def plugin_dir() -> Path:
    """The directory of the imported ``sipe_fairseq`` package (absolute)."""
    return Path(sipe_fairseq.__file__).resolve().parent


def main(argv: Optional[List[str]] = None) -> int:
    argparse.ArgumentParser(prog="sipe-user-dir", description=__doc__.split("\n\n")[0]).parse_args(argv)
    print(plugin_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
