"""Loading the hexatag streams written by ``sipe-preprocess``, checked against the token stream."""
import os
from typing import Dict, Optional, Sequence

import numpy as np
from fairseq.data import data_utils

from .tag_dictionary import TAG_KINDS


def load_tag_streams(
    data_path: str,
    split: str,
    token_dataset,
    kinds: Sequence[str] = TAG_KINDS,
    dataset_impl: Optional[str] = None,
) -> Dict[str, object]:
    """Load ``{split}.{kind}.bin/.idx`` for each kind; returns ``{kind: indexed dataset}``.

    Every stream must hold exactly one id per token of ``token_dataset`` (same number of
    sentences, same length per sentence, compared on the ``.sizes`` arrays): otherwise a
    ``ValueError`` names the split, the stream and the first sentence that differs. A missing
    stream raises ``FileNotFoundError`` explaining how to make one.
    """
    token_sizes = np.asarray(token_dataset.sizes)
    out = {}
    for kind in kinds:
        prefix = os.path.join(data_path, f"{split}.{kind}")
        ds = data_utils.load_indexed_dataset(prefix, None, dataset_impl)
        if ds is None:
            raise FileNotFoundError(
                f"{data_path} has no hexatag stream {split}.{kind} (.bin/.idx): it is not a SiPE data "
                f"directory; make one from CoNLL-U with `sipe-preprocess --train FILE ... --destdir DIR`"
            )
        sizes = np.asarray(ds.sizes)
        if len(sizes) != len(token_sizes):
            raise ValueError(
                f"split {split!r}: stream {kind!r} has {len(sizes)} sentences, the token stream "
                f"{len(token_sizes)}; rebuild {data_path} with sipe-preprocess"
            )
        bad = np.flatnonzero(sizes != token_sizes)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"split {split!r}: stream {kind!r} is not aligned with the tokens: sentence {i} has "
                f"{int(sizes[i])} {kind} ids but {int(token_sizes[i])} tokens ({bad.size} sentences differ); "
                f"rebuild {data_path} with sipe-preprocess"
            )
        out[kind] = ds
    return out
