"""Loading the hexatag streams written by ``sipe-preprocess``, checked against the token stream."""
import os
from typing import Dict, Optional, Sequence

from fairseq.data import data_utils

from .tag_dictionary import TAG_KINDS
from .validate import check_alignment, missing_stream


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
    :class:`~sipe_fairseq.data.validate.DataError` names the stream's index and the first sentence
    that differs; a missing stream raises one too, explaining how to make one. The full checks of a
    split (file structure, ids, tag positions, manifest) are :func:`~sipe_fairseq.data.validate.validate_split`.
    """
    out = {}
    for kind in kinds:
        prefix = os.path.join(data_path, f"{split}.{kind}")
        ds = data_utils.load_indexed_dataset(prefix, None, dataset_impl)
        if ds is None:
            raise missing_stream(prefix, kind, split, data_path)
        check_alignment(ds.sizes, token_dataset.sizes, prefix + ".idx", os.path.join(data_path, split) + ".idx", kind, split)
        out[kind] = ds
    return out
